package dev.icefloe.spark;

/** SQL quoting as the server names things: identifiers in double quotes, embedded quotes doubled. */
final class SqlText {
  private SqlText() {}

  static String identifier(String name) {
    return "\"" + name.replace("\"", "\"\"") + "\"";
  }

  static String string(String value) {
    return "'" + value.replace("'", "''") + "'";
  }

  /** Namespace and table name of {@code ns.t}; the last dot separates the table, so a
   * multi-level namespace stays one schema name ({@code "a.b"."t"}), as the server names it. */
  static String[] split(String qualified) {
    int dot = qualified.lastIndexOf('.');
    if (dot <= 0 || dot == qualified.length() - 1) {
      throw new IllegalArgumentException(
          "option table must be namespace.table, got '" + FlightOptions.cut(qualified) + "'");
    }
    return new String[] {qualified.substring(0, dot), qualified.substring(dot + 1)};
  }

  static String table(String qualified) {
    String[] parts = split(qualified);
    return identifier(parts[0]) + "." + identifier(parts[1]);
  }

  /** A metadata table of {@code ns.t}, e.g. {@code "ns"."t$history"}. */
  static String metadataTable(String qualified, String suffix) {
    String[] parts = split(qualified);
    return identifier(parts[0]) + "." + identifier(parts[1] + "$" + suffix);
  }
}
