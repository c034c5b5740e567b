package config

// Validation configures order-body validation (routes with
// validate: order) and the market catalogue it checks against.
type Validation struct{}

// DefaultValidation returns the built-in validation settings.
func DefaultValidation() Validation { return Validation{} }

// Idempotency configures duplicate protection on order identifiers.
type Idempotency struct{}

// DefaultIdempotency returns the built-in duplicate-protection settings.
func DefaultIdempotency() Idempotency { return Idempotency{} }

// checkValidation reports problems in the validation and idempotency
// sections.
func (c *Config) checkValidation(v *checker) {}
