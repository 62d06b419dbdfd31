// A kubelet-shaped gRPC client: one unary call over a unix socket, dialled the way kubelet dials
// its plugins (pkg/kubelet/pluginmanager/operationexecutor/operation_generator.go `dial`,
// pkg/kubelet/cm/dra/plugin/dra_plugin.go `getOrCreateGRPCConn`): grpc.DialContext with the
// socket's PATH as target, insecure, a context dialer for "unix", and no WithAuthority. grpc-go
// then sends its own idea of the `:authority` (this grpc-go: the raw path; grpc-go >= 1.54: the
// path percent-encoded by encodeAuthority, which -authority encoded reproduces).
//
// Messages travel as bytes (the Rust test encodes and decodes them with prost), so no generated
// Go code is needed: only Debian's golang-google-grpc-dev.
//
// Usage: client -socket PATH -method /pkg.Service/Method -request HEX [-authority default|encoded|VALUE]
// Prints the response as hex on stdout; on a gRPC error prints "code: message" on stderr, exit 2.
package main

import (
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"net"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// raw passes message bytes through unchanged.
type raw struct{}

func (raw) Marshal(v interface{}) ([]byte, error) { return *v.(*[]byte), nil }
func (raw) Unmarshal(data []byte, v interface{}) error {
	*v.(*[]byte) = append([]byte(nil), data...)
	return nil
}
func (raw) Name() string { return "proto" }

// encodeAuthority is grpc-go's (clientconn.go, v1.54 on): every byte outside RFC 3986's
// unreserved, sub-delims and ":[]@" is percent-encoded, so "/" becomes "%2F".
func encodeAuthority(authority string) string {
	const upperhex = "0123456789ABCDEF"
	keep := func(c byte) bool {
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
			return true
		}
		switch c {
		case '-', '_', '.', '~', '!', '$', '&', '\'', '(', ')', '*', '+', ',', ';', '=', ':', '[', ']', '@':
			return true
		}
		return false
	}
	out := make([]byte, 0, len(authority)*3)
	for i := 0; i < len(authority); i++ {
		c := authority[i]
		if keep(c) {
			out = append(out, c)
		} else {
			out = append(out, '%', upperhex[c>>4], upperhex[c&15])
		}
	}
	return string(out)
}

func main() {
	socket := flag.String("socket", "", "unix socket path (the dial target, as kubelet gives it)")
	method := flag.String("method", "", "full method name")
	request := flag.String("request", "", "request message, hex")
	authority := flag.String("authority", "default", "default (grpc-go's own), encoded (grpc-go >= 1.54's), or a value for WithAuthority")
	flag.Parse()
	body, err := hex.DecodeString(*request)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bad -request:", err)
		os.Exit(1)
	}
	opts := []grpc.DialOption{
		grpc.WithInsecure(),
		grpc.WithBlock(),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", addr)
		}),
	}
	switch *authority {
	case "default":
	case "encoded":
		opts = append(opts, grpc.WithAuthority(encodeAuthority(*socket)))
	default:
		opts = append(opts, grpc.WithAuthority(*authority))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := grpc.DialContext(ctx, *socket, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dial:", err)
		os.Exit(1)
	}
	defer conn.Close()
	var resp []byte
	if err := conn.Invoke(ctx, *method, &body, &resp, grpc.ForceCodec(raw{})); err != nil {
		s := status.Convert(err)
		fmt.Fprintf(os.Stderr, "%s: %s\n", s.Code(), s.Message())
		os.Exit(2)
	}
	fmt.Println(hex.EncodeToString(resp))
}
