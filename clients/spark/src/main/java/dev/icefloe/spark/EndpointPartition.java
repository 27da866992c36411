package dev.icefloe.spark;

import org.apache.spark.sql.connector.read.InputPartition;

/** One Flight endpoint: its signed ticket, and the server to ask when the endpoint names one. */
final class EndpointPartition implements InputPartition {
  private static final long serialVersionUID = 1L;

  final byte[] ticket;
  final String location;

  EndpointPartition(byte[] ticket, String location) {
    this.ticket = ticket;
    this.location = location;
  }
}
