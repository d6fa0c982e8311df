//! Placeholder: the RabbitMQ broker (lapin) lands with the broker work.
