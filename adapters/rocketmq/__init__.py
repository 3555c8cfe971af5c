"""rocketmq adapter."""
