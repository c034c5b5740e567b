module github.com/exgate/exgate

go 1.26

require (
	github.com/golang-jwt/jwt/v5 v5.3.1 // indirect
	github.com/shopspring/decimal v1.6.0 // indirect
	go.uber.org/multierr v1.10.0 // indirect
	go.uber.org/zap v1.28.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)
