// Package kafkaxtest holds test doubles for kafkax: an in-process kfake
// cluster with a reader that consumes what was written, and an in-memory
// Producer that records writes and can be told to fail or block.
package kafkaxtest
