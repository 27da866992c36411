package dev.icefloe.spark;

import org.apache.arrow.flight.FlightRuntimeException;

/** A server refusal or connector failure, in the server's words without gRPC's debug context. */
public final class IcefloeFlightException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  IcefloeFlightException(String message) {
    super(message);
  }

  IcefloeFlightException(String message, Throwable cause) {
    super(message, cause);
  }

  /** The server's status code when this is a server refusal, else null. */
  org.apache.arrow.flight.FlightStatusCode code() {
    return getCause() instanceof FlightRuntimeException ? ((FlightRuntimeException) getCause()).status().code() : null;
  }

  static IcefloeFlightException from(String context, FlightRuntimeException e) {
    String text = e.getMessage() == null ? e.status().code().name() : e.getMessage();
    int cutAt = text.indexOf(". Detail:");
    if (cutAt > 0) {
      text = text.substring(0, cutAt);
    }
    String message = e.status().code().name() + ": " + text;
    return new IcefloeFlightException(context == null ? message : context + ": " + message, e);
  }
}
