"""The gRPC server: the gateway API, admin, health, reflection and mounted front ends."""
