package main

import "path/filepath"

// configName names the config file serve runs with.
func configName(path string) string {
	if path == "" {
		return "(embedded default: set SLUICE_CONFIG or --config for a file)"
	}
	return absPath(path)
}

// absPath is path made absolute, or path itself when the working directory
// is unknown.
func absPath(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}
