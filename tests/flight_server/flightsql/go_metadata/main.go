// Command go_metadata runs queries through arrow-go's Flight SQL client and prints, for every
// result column, the column metadata arrow-go reads (flightsql.ColumnMetadata), from the
// FlightInfo schema and from the DoGet stream: one "COLUMN query field key=value..." line each.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/flight/flightsql"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func describe(f arrow.Field) string {
	md := flightsql.ColumnMetadata{Data: &f.Metadata}
	parts := []string{}
	if v, ok := md.CatalogName(); ok {
		parts = append(parts, "catalog="+v)
	}
	if v, ok := md.SchemaName(); ok {
		parts = append(parts, "schema="+v)
	}
	if v, ok := md.TableName(); ok {
		parts = append(parts, "table="+v)
	}
	if v, ok := md.TypeName(); ok {
		parts = append(parts, "type="+v)
	}
	if v, ok := md.IsReadOnly(); ok {
		parts = append(parts, fmt.Sprintf("readonly=%t", v))
	}
	if v, ok := md.IsAutoIncrement(); ok {
		parts = append(parts, fmt.Sprintf("autoincrement=%t", v))
	}
	parts = append(parts, fmt.Sprintf("nullable=%t", f.Nullable))
	return strings.Join(parts, " ")
}

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: go_metadata HOST:PORT QUERY...")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client, err := flightsql.NewClient(os.Args[1], nil, nil, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(os.Stderr, "connect:", err)
		os.Exit(1)
	}
	defer client.Close()
	for i, query := range os.Args[2:] {
		info, err := client.Execute(ctx, query)
		if err != nil {
			fmt.Fprintln(os.Stderr, "execute:", err)
			os.Exit(1)
		}
		planned, err := flight.DeserializeSchema(info.Schema, memory.DefaultAllocator)
		if err != nil {
			fmt.Fprintln(os.Stderr, "schema:", err)
			os.Exit(1)
		}
		reader, err := client.DoGet(ctx, info.Endpoint[0].Ticket)
		if err != nil {
			fmt.Fprintln(os.Stderr, "doget:", err)
			os.Exit(1)
		}
		for reader.Next() {
		}
		streamed := reader.Schema()
		reader.Release()
		for j, f := range planned.Fields() {
			fmt.Printf("PLANNED %d %s %s\n", i, f.Name, describe(f))
			fmt.Printf("STREAMED %d %s %s\n", i, f.Name, describe(streamed.Field(j)))
		}
	}
}
