package redisstore_test

const childEnv = "SLUICE_REDISSTORE_CHILD"

func runChild(role string) int { return 2 }
