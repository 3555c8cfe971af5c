"""amqp adapter."""
