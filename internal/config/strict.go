package config

import (
	"fmt"
	"math"
	"reflect"
)

// strictHook runs before mapstructure's weakly typed decoding, which
// stays on because environment variables arrive as strings ("7", "true",
// "a,b"). Weak decoding would also accept YAML values that are surely
// mistakes and turn them into something else without a word: 2.5 into 2
// for an int, 1 into true for a bool, true into "1" for a string. Those
// are rejected here, so the field is named instead.
func strictHook(from, to reflect.Type, data any) (any, error) {
	switch to.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if to == reflect.TypeOf(ByteSize(0)) && from.Kind() == reflect.String {
			return data, nil // byteSizeHook reads units
		}
		switch from.Kind() {
		case reflect.Float32, reflect.Float64:
			f := reflect.ValueOf(data).Float()
			if f != math.Trunc(f) || math.IsInf(f, 0) {
				return nil, fmt.Errorf("must be a whole number, got %v", data)
			}
		case reflect.Bool:
			return nil, fmt.Errorf("must be a number, got %v", data)
		}
	case reflect.Float32, reflect.Float64:
		if from.Kind() == reflect.Bool {
			return nil, fmt.Errorf("must be a number, got %v", data)
		}
	case reflect.Bool:
		switch from.Kind() {
		case reflect.Bool, reflect.String: // a string: an environment variable, read strictly by mapstructure
		default:
			return nil, fmt.Errorf("must be true or false, got %v", data)
		}
	case reflect.Struct:
		if from.Kind() != reflect.Map && from.Kind() != reflect.Struct {
			if _, ok := to.FieldByName("Enabled"); ok {
				// kafka.tls: true, where seenset.redis.tls is a bool.
				return nil, fmt.Errorf("must be a mapping of its fields, got %v (write {enabled: %v})", data, data)
			}
			return nil, fmt.Errorf("must be a mapping of its fields, got %v", data)
		}
	case reflect.String:
		switch from.Kind() {
		case reflect.Bool, reflect.Float32, reflect.Float64:
			// YAML read `password: true` or `routing_key: 1.10` as a bool
			// or a float; as a string it would be "1" or "1.1".
			return nil, fmt.Errorf("must be a string, got %v (quote it in YAML)", data)
		case reflect.Map, reflect.Slice:
			return nil, fmt.Errorf("must be a string, got a %s", kindName(from.Kind()))
		}
	}
	return data, nil
}

func kindName(k reflect.Kind) string {
	if k == reflect.Map {
		return "mapping"
	}
	return "list"
}
