// Command feedsub is a commit-feed subscriber for benchmarks/bench_feed.py: N concurrent
// DoExchange streams in one process, one goroutine each, recording when every append event
// arrives. It follows the contract of subscriber_main in bench_feed.py:
//
//	feedsub <location> <streams N> <expected E> <stalled 0|1>
//
// It prints "ready" once every stream has had its hello; then, unless stalled, it prints one
// JSON line: per stream, [seq, arrival Unix ns, committed_at us] for its first E appends.
// Stalled, it never reads past hello and exits when a line arrives on stdin.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

var request = []byte(`{"feed": "commits.v1", "after": "latest", "tables": ["bench.*"]}`)

// arrival is one append event as seen by one stream: [seq, arrival ns, committed_at us].
type arrival [3]int64

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "feedsub: "+format+"\n", args...)
	os.Exit(1)
}

// dataStream hands only data messages (schema, batches) to the IPC reader and notes when the
// last one arrived. Metadata-only messages (heartbeats) carry no IPC message, so they are
// dropped here rather than given to the reader, which could not parse them.
type dataStream struct {
	call    flight.FlightService_DoExchangeClient
	arrived int64 // Unix ns at which the last data message came out of gRPC
}

func (d *dataStream) Recv() (*flight.FlightData, error) {
	for {
		fd, err := d.call.Recv()
		now := time.Now().UnixNano() // before any Arrow decoding
		if err != nil {
			return nil, err
		}
		if len(fd.DataHeader) > 0 || len(fd.DataBody) > 0 {
			d.arrived = now
			return fd, nil
		}
	}
}

// open starts one feed and waits for its hello.
func open(ctx context.Context, client flight.Client) (flight.FlightService_DoExchangeClient, error) {
	call, err := client.DoExchange(ctx)
	if err != nil {
		return nil, err
	}
	descr := &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: request}
	if err := call.Send(&flight.FlightData{FlightDescriptor: descr}); err != nil {
		return nil, err
	}
	if err := call.CloseSend(); err != nil { // the client sends nothing more
		return nil, err
	}
	hello, err := call.Recv()
	if err != nil {
		return nil, err
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal(hello.AppMetadata, &body); err != nil || body["hello"] == nil {
		return nil, fmt.Errorf("expected hello, got %q", hello.AppMetadata)
	}
	return call, nil
}

// follow reads one stream until it has seen `expected` appends.
func follow(call flight.FlightService_DoExchangeClient, expected int) ([]arrival, error) {
	got := make([]arrival, 0, expected)
	if expected == 0 {
		return got, nil
	}
	src := &dataStream{call: call}
	// The server sends the schema message right before its first batch.
	rdr, err := flight.NewRecordReader(src)
	if err != nil {
		return nil, err
	}
	defer rdr.Release()
	schema := rdr.Schema()
	col := func(name string) int {
		idx := schema.FieldIndices(name)
		if len(idx) != 1 {
			fail("event schema has no single %q column: %s", name, schema)
		}
		return idx[0]
	}
	seqCol, atCol, opCol := col("seq"), col("committed_at"), col("operation")
	if ts, ok := schema.Field(atCol).Type.(*arrow.TimestampType); !ok || ts.Unit != arrow.Microsecond {
		return nil, fmt.Errorf("committed_at is %s, expected timestamp[us]", schema.Field(atCol).Type)
	}
	for len(got) < expected && rdr.Next() {
		rec := rdr.RecordBatch()
		now := src.arrived // a batch is one message: the last one received
		seqs := rec.Column(seqCol).(*array.Int64)
		ats := rec.Column(atCol).(*array.Timestamp)
		ops := rec.Column(opCol).(*array.String)
		for i := 0; i < int(rec.NumRows()); i++ {
			// Only the writer's appends count (background compaction commits too).
			if ops.Value(i) == "append" {
				got = append(got, arrival{seqs.Value(i), now, int64(ats.Value(i))})
			}
		}
	}
	if len(got) < expected {
		if err := rdr.Err(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("stream ended after %d of %d appends", len(got), expected)
	}
	return got, nil
}

func main() {
	if len(os.Args) != 5 {
		fail("usage: feedsub <location> <streams> <expected> <stalled 0|1>")
	}
	streams, err1 := strconv.Atoi(os.Args[2])
	expected, err2 := strconv.Atoi(os.Args[3])
	if err1 != nil || err2 != nil || streams < 1 || expected < 0 {
		fail("bad streams/expected: %q %q", os.Args[2], os.Args[3])
	}
	stalled := os.Args[4] == "1"
	// gRPC-Go wants host:port, the Python side passes a Flight URI.
	addr := os.Args[1]
	for _, scheme := range []string{"grpc://", "grpc+tcp://"} {
		addr = strings.TrimPrefix(addr, scheme)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if stalled {
		// Fixed 64 KiB windows (no BDP growth): a stream that is not read blocks the server's
		// writes to it as soon as possible, like STALLING_OPTIONS on the Python side.
		opts = append(opts, grpc.WithInitialWindowSize(65535), grpc.WithInitialConnWindowSize(65535))
	}
	// One connection shared by all streams (HTTP/2 multiplexes them). Against one connection
	// per stream, at 100 streams, commit -> arrival p50 was 0.1-1.7 ms lower shared in each
	// of 5 paired runs; the other percentiles were within noise.
	client, err := flight.NewClientWithMiddleware(addr, nil, nil, opts...)
	if err != nil {
		fail("connect %s: %v", addr, err)
	}

	ctx := context.Background()
	results := make([][]arrival, streams)
	var hellos, done sync.WaitGroup
	hellos.Add(streams)
	done.Add(streams)
	for i := range streams {
		go func() {
			call, err := open(ctx, client)
			if err != nil {
				fail("stream %d: open feed: %v", i, err)
			}
			hellos.Done()
			if stalled {
				return // never read: the server's writes to this stream back up
			}
			if results[i], err = follow(call, expected); err != nil {
				fail("stream %d: %v", i, err)
			}
			done.Done()
		}()
	}
	if !waitTimeout(&hellos, 120*time.Second) {
		fail("not every stream had its hello within 120 s")
	}
	fmt.Println("ready")

	if stalled {
		// Hold the streams open, unread, until the parent writes a line (or closes stdin).
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		os.Exit(0)
	}
	done.Wait()
	out, err := json.Marshal(results)
	if err != nil {
		fail("encode: %v", err)
	}
	fmt.Println(string(out))
}

func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}
