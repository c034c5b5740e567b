package config

import (
	"encoding"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Marshal returns the configuration as a YAML document with every key
// written out, in the form Parse reads (it backs `exgate -print-config`).
// For a config that Validate accepted, Parse(Marshal()) equals the config.
func (c *Config) Marshal() ([]byte, error) {
	n, err := encodeValue(reflect.ValueOf(c).Elem())
	if err != nil {
		return nil, err
	}
	n.HeadComment = "exgate effective configuration"
	var b strings.Builder
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(n); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return []byte(b.String()), nil
}

// flowTypes are written on one line: they are short and come in lists.
var flowTypes = []reflect.Type{reflect.TypeFor[Limit](), reflect.TypeFor[TierLimit]()}

// scalarNode returns a scalar node with an explicit tag, so that the
// encoder quotes strings that would otherwise read as another type.
func scalarNode(tag, value string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value}
}

// encodeValue turns v into a YAML node, following the same schema rules
// as the decoder.
func encodeValue(v reflect.Value) (*yaml.Node, error) {
	t := v.Type()
	switch {
	case t.Implements(textMarshalerType) && isText(t):
		b, err := v.Interface().(encoding.TextMarshaler).MarshalText()
		if err != nil {
			return nil, err
		}
		return scalarNode("!!str", string(b)), nil
	case t == durationType:
		return scalarNode("!!str", fmt.Sprint(v.Interface())), nil
	case t.Kind() == reflect.String:
		return scalarNode("!!str", v.String()), nil
	case t.Kind() == reflect.Bool:
		return scalarNode("!!bool", strconv.FormatBool(v.Bool())), nil
	case isScalar(t): // integers
		return scalarNode("!!int", strconv.FormatInt(v.Int(), 10)), nil
	case t.Kind() == reflect.Struct:
		n := &yaml.Node{Kind: yaml.MappingNode}
		if slices.Contains(flowTypes, t) {
			n.Style = yaml.FlowStyle
		}
		for i := 0; i < t.NumField(); i++ {
			k := yamlName(t.Field(i))
			if k == "" || v.Field(i).IsZero() && strings.Contains(t.Field(i).Tag.Get("yaml"), ",omitempty") {
				continue // a former name, set only by an old file
			}
			if v.Field(i).Kind() == reflect.Pointer && v.Field(i).IsNil() {
				continue // an optional block not given
			}
			fv, err := encodeValue(v.Field(i))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			n.Content = append(n.Content, scalarNode("!!str", k), fv)
		}
		return n, nil
	case t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct:
		return encodeValue(v.Elem())
	case t.Kind() == reflect.Slice:
		n := &yaml.Node{Kind: yaml.SequenceNode}
		if isScalar(t.Elem()) || v.Len() == 0 {
			n.Style = yaml.FlowStyle
		}
		for i := 0; i < v.Len(); i++ {
			iv, err := encodeValue(v.Index(i))
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, iv)
		}
		return n, nil
	case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String:
		n := &yaml.Node{Kind: yaml.MappingNode}
		if v.Len() == 0 {
			n.Style = yaml.FlowStyle
		}
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
		for _, k := range keys {
			ev, err := encodeValue(v.MapIndex(k))
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, scalarNode("!!str", k.String()), ev)
		}
		return n, nil
	}
	return nil, fmt.Errorf("config: cannot marshal %s", t)
}
