// Package tlsfiles builds the TLS configurations of tailcause's clients and
// listeners from PEM files: ClientConfig for the Kafka and ClickHouse
// clients (a CA bundle, an optional client certificate, the server name),
// ServerConfig for the OTLP and query listeners (a certificate and key, an
// optional CA of the client certificates it requires). Files are read once,
// when the configuration is built; a rotated certificate takes a restart.
package tlsfiles
