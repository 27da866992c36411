package dev.icefloe.spark;

import java.time.Instant;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.Set;
import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.Literal;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;

/**
 * Spark V2 predicates rendered as SQL for the server; whatever does not render exactly goes
 * back to Spark, which filters those rows itself. Literals are inline (the server splits only
 * unparameterised scans into several endpoints), strings quoted with embedded quotes doubled
 * and identifiers double-quoted, so no value can leave its literal.
 */
final class PredicateSql {
  /** Thrown for a predicate that cannot be pushed. */
  static final class Unsupported extends Exception {
    private static final long serialVersionUID = 1L;

    Unsupported() {
      super(null, null, false, false);
    }
  }

  private final Set<String> columns;

  /** @param columns the top-level columns that are pushed as themselves (not cast on the way) */
  PredicateSql(Set<String> columns) {
    this.columns = columns;
  }

  String render(Predicate p) throws Unsupported {
    Expression[] c = p.children();
    switch (p.name()) {
      case "=": case ">": case ">=": case "<": case "<=": case "<>":
        return binary(c[0], p.name(), c[1]);
      case "<=>":
        return binary(c[0], "IS NOT DISTINCT FROM", c[1]);
      case "IS_NULL":
        return column(c[0]) + " IS NULL";
      case "IS_NOT_NULL":
        return column(c[0]) + " IS NOT NULL";
      case "IN": {
        StringBuilder out = new StringBuilder(column(c[0])).append(" IN (");
        int rendered = 0;
        for (int i = 1; i < c.length; i++) {
          Object value = ((Literal<?>) literalOf(c[i])).value();
          if (value == null) {
            continue; // x IN (.., NULL) is never true for the NULL; same rows either way
          }
          out.append(rendered++ == 0 ? "" : ", ").append(literal(literalOf(c[i])));
        }
        if (rendered == 0) {
          throw new Unsupported();
        }
        return out.append(")").toString();
      }
      case "STARTS_WITH": case "ENDS_WITH": case "CONTAINS":
        return p.name().toLowerCase(java.util.Locale.ROOT) + "(" + column(c[0]) + ", " + literal(literalOf(c[1])) + ")";
      case "AND":
        return "(" + render((Predicate) c[0]) + ") AND (" + render((Predicate) c[1]) + ")";
      case "OR":
        return "(" + render((Predicate) c[0]) + ") OR (" + render((Predicate) c[1]) + ")";
      case "NOT":
        return "NOT (" + render((Predicate) c[0]) + ")";
      case "ALWAYS_TRUE":
        return "TRUE";
      case "ALWAYS_FALSE":
        return "FALSE";
      default:
        throw new Unsupported();
    }
  }

  private String binary(Expression left, String op, Expression right) throws Unsupported {
    if (left instanceof NamedReference && right instanceof Literal) {
      return column(left) + " " + op + " " + literal((Literal<?>) right);
    }
    if (left instanceof Literal && right instanceof NamedReference) {
      return literal((Literal<?>) left) + " " + op + " " + column(right);
    }
    if (left instanceof NamedReference && right instanceof NamedReference) {
      return column(left) + " " + op + " " + column(right);
    }
    throw new Unsupported();
  }

  private static Literal<?> literalOf(Expression e) throws Unsupported {
    if (e instanceof Literal) {
      return (Literal<?>) e;
    }
    throw new Unsupported();
  }

  String column(Expression e) throws Unsupported {
    if (!(e instanceof NamedReference)) {
      throw new Unsupported();
    }
    String[] names = ((NamedReference) e).fieldNames();
    if (names.length != 1 || !columns.contains(names[0])) {
      throw new Unsupported(); // nested fields and cast columns stay with Spark
    }
    return SqlText.identifier(names[0]);
  }

  static String literal(Literal<?> literal) throws Unsupported {
    Object value = literal.value();
    DataType type = literal.dataType();
    if (value == null) {
      throw new Unsupported(); // comparisons with NULL are never true; let Spark decide
    }
    if (type instanceof BooleanType) {
      return ((Boolean) value) ? "TRUE" : "FALSE";
    }
    if (type instanceof ByteType || type instanceof ShortType || type instanceof IntegerType
        || type instanceof LongType) {
      return value.toString();
    }
    if (type instanceof FloatType || type instanceof DoubleType) {
      double d = ((Number) value).doubleValue();
      if (!Double.isFinite(d)) {
        throw new Unsupported();
      }
      return "CAST(" + (type instanceof FloatType ? Float.toString((Float) value) : Double.toString(d))
          + " AS " + (type instanceof FloatType ? "FLOAT" : "DOUBLE") + ")";
    }
    if (type instanceof DecimalType) {
      DecimalType t = (DecimalType) type;
      return "CAST('" + ((Decimal) value).toJavaBigDecimal().toPlainString() + "' AS DECIMAL("
          + t.precision() + ", " + t.scale() + "))";
    }
    if (type instanceof StringType) {
      return SqlText.string(value.toString()); // UTF8String.toString decodes UTF-8
    }
    if (type instanceof BinaryType) {
      StringBuilder hex = new StringBuilder("from_hex('");
      for (byte b : (byte[]) value) {
        hex.append(String.format("%02x", b));
      }
      return hex.append("')").toString();
    }
    if (type instanceof DateType) {
      return "DATE '" + LocalDate.ofEpochDay((Integer) value) + "'";
    }
    if (type instanceof TimestampType) {
      long micros = (Long) value;
      Instant instant = Instant.ofEpochSecond(Math.floorDiv(micros, 1_000_000L),
          Math.floorMod(micros, 1_000_000L) * 1000L);
      return "TIMESTAMPTZ '" + instant + "'";
    }
    if (type instanceof TimestampNTZType) {
      long micros = (Long) value;
      LocalDateTime local = LocalDateTime.ofEpochSecond(Math.floorDiv(micros, 1_000_000L),
          (int) (Math.floorMod(micros, 1_000_000L) * 1000L), ZoneOffset.UTC);
      return "TIMESTAMP '" + local + "'";
    }
    throw new Unsupported();
  }
}
