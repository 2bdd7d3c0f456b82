"""Everything that touches the outside world: files, Kafka, ZMQ, Prometheus, Kubernetes."""
