"""End-to-end tests: unmodified pika, aio-pika, kombu and raw sockets against a real qpidd."""
