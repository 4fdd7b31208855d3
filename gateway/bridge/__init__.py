"""The version bridge: clients that speak versions the upstream no longer accepts (the
ones Kafka 4.0 removed, KIP-896) carried across by converting their requests up and the
answers down. ``messages`` is the spec-driven codec, ``records`` the message-set and
record-batch conversion, ``policy`` who is bridged. Sans-I/O: this package knows no
connection, config or interceptor; ``gateway.interceptors.bridging`` puts it to work."""
