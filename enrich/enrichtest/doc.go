// Package enrichtest has test doubles for the enricher's ports: Rows, an
// in-memory enrich.RowWriter that fails as chstore.Store does (the staged
// chstore.InsertError, ClickHouse's exception codes), checked against the
// real store by enrich's TestRowWriterConformance.
package enrichtest
