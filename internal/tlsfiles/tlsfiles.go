package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// ClientConfig trusts the PEM CAs in caFile (empty: the system's roots),
// presents the client certificate in certFile/keyFile when given (both or
// neither), and checks serverName in the server's certificate when given
// (empty: the host dialled).
func ClientConfig(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile != "" {
		pool, err := loadPool(caFile)
		if err != nil {
			return nil, err
		}
		tc.RootCAs = pool
	}
	if certFile != "" || keyFile != "" {
		cert, err := loadPair(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// ServerConfig serves the certificate in certFile/keyFile and, when
// clientCAFile is set, requires every client to present a certificate
// signed by one of its CAs (mutual TLS).
func ServerConfig(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, fmt.Errorf("tls: a listener needs both a certificate and a key file")
	}
	cert, err := loadPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if clientCAFile != "" {
		pool, err := loadPool(clientCAFile)
		if err != nil {
			return nil, err
		}
		tc.ClientCAs, tc.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

func loadPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tls: read CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tls: CA file %s holds no PEM certificate", file)
	}
	return pool, nil
}

func loadPair(certFile, keyFile string) (tls.Certificate, error) {
	if certFile == "" || keyFile == "" {
		return tls.Certificate{}, fmt.Errorf("tls: a certificate needs both its certificate and its key file")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		// crypto/tls's errors name the problem (no PEM data, a key that
		// does not match), never the key's bytes.
		return tls.Certificate{}, fmt.Errorf("tls: load certificate %s and key %s: %w", certFile, keyFile, err)
	}
	return cert, nil
}
