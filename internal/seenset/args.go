package seenset

// validateKey and validateKeyToken are validateArgs for the methods that
// take no duration (Release, Forget, Status), so every backend rejects the
// same inputs with the same errors before touching its storage.
func validateKey(key string) error {
	if key == "" {
		return ErrInvalidArgument
	}
	return nil
}

func validateKeyToken(key, token string) error {
	if key == "" || token == "" {
		return ErrInvalidArgument
	}
	return nil
}
