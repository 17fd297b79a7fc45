package config

import "time"

// DefaultLiveSecretKeyEnv names the variable holding the key client
// secrets are sealed with, when live.secret_key_env names none.
const DefaultLiveSecretKeyEnv = "SLUICE_LIVE_SECRET_KEY"

// Live configures live connections (GET /v1/realtime) and their mint (POST
// /v1/realtime/client_secrets). Zero fields take the gateway's defaults.
type Live struct {
	// MaxDuration closes a live connection that no session's wall clock
	// ends sooner (60m).
	MaxDuration time.Duration `yaml:"max_duration,omitempty"`
	// MaxFrameBytes caps a client event; a larger frame closes the
	// connection with 1009 (1 MiB).
	MaxFrameBytes int64 `yaml:"max_frame_bytes,omitempty"`
	// WriteTimeout closes a side that does not read for this long (10s).
	WriteTimeout time.Duration `yaml:"write_timeout,omitempty"`
	// SecretKeyEnv names the environment variable holding the key client
	// secrets are sealed with, which replicas must share
	// (SLUICE_LIVE_SECRET_KEY); unset, each process seals with a random
	// key of its own.
	SecretKeyEnv string `yaml:"secret_key_env,omitempty"`
}

// SecretKey returns the key client secrets are sealed with, from the
// environment (env as os.LookupEnv); nil when unset.
func (l Live) SecretKey(env func(string) (string, bool)) []byte {
	name := l.SecretKeyEnv
	if name == "" {
		name = DefaultLiveSecretKeyEnv
	}
	if v, ok := env(name); ok && v != "" {
		return []byte(v)
	}
	return nil
}

func (v *checker) live() {
	l := v.c.Live
	if l.MaxDuration < 0 || l.MaxDuration > 24*time.Hour {
		v.add("live.max_duration", "must be from 1s to 24h, got %v", l.MaxDuration)
	}
	if l.MaxFrameBytes < 0 || l.MaxFrameBytes > 64<<20 {
		v.add("live.max_frame_bytes", "must be from 1 to 64 MiB, got %d", l.MaxFrameBytes)
	}
	if l.WriteTimeout < 0 || l.WriteTimeout > 5*time.Minute {
		v.add("live.write_timeout", "must be from 1ms to 5m, got %v", l.WriteTimeout)
	}
}
