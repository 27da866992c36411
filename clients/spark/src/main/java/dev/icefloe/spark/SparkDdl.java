package dev.icefloe.spark;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import org.apache.spark.sql.connector.catalog.TableChange;
import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.Literal;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.CharType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;
import org.apache.spark.sql.types.VarcharType;

/**
 * Spark's table definitions and changes as the server's SQL DDL. The server makes Iceberg types
 * of SQL types, so a Spark type maps to the SQL type that becomes the matching Iceberg type
 * (byte and short widen to int: Iceberg has no smaller integers). Anything else is refused here,
 * naming the column, before the server sees a statement.
 */
final class SparkDdl {
  private SparkDdl() {}

  /** Table properties Spark adds on its own; none of them is an Iceberg table property. */
  static final List<String> RESERVED = List.of("provider", "owner", "location", "comment", "external",
      "is_managed_location", "collation");

  static String sqlType(DataType type, String column) {
    if (type instanceof BooleanType) {
      return "BOOLEAN";
    }
    if (type instanceof ByteType || type instanceof ShortType || type instanceof IntegerType) {
      return "INTEGER";
    }
    if (type instanceof LongType) {
      return "BIGINT";
    }
    if (type instanceof FloatType) {
      return "FLOAT";
    }
    if (type instanceof DoubleType) {
      return "DOUBLE";
    }
    if (type instanceof DecimalType) {
      DecimalType d = (DecimalType) type;
      return "DECIMAL(" + d.precision() + ", " + d.scale() + ")";
    }
    if (type instanceof StringType || type instanceof VarcharType || type instanceof CharType) {
      return "VARCHAR";
    }
    if (type instanceof BinaryType) {
      return "BLOB";
    }
    if (type instanceof DateType) {
      return "DATE";
    }
    if (type instanceof TimestampType) {
      return "TIMESTAMPTZ";
    }
    if (type instanceof TimestampNTZType) {
      return "TIMESTAMP";
    }
    if (type instanceof ArrayType) {
      return sqlType(((ArrayType) type).elementType(), column) + "[]";
    }
    if (type instanceof MapType) {
      MapType m = (MapType) type;
      return "MAP(" + sqlType(m.keyType(), column) + ", " + sqlType(m.valueType(), column) + ")";
    }
    if (type instanceof StructType) {
      List<String> fields = new ArrayList<>();
      for (StructField f : ((StructType) type).fields()) {
        fields.add(SqlText.identifier(f.name()) + " " + sqlType(f.dataType(), column + "." + f.name()));
      }
      return "STRUCT(" + String.join(", ", fields) + ")";
    }
    throw new IllegalArgumentException("column " + column + ": Spark type " + type.catalogString()
        + " has no Iceberg type the server stores");
  }

  /** {@code CREATE TABLE ns.t (...) [PARTITIONED BY (...)]} for a Spark schema. */
  static String createTable(String qualified, StructType schema, Transform[] partitions) {
    List<String> columns = new ArrayList<>();
    for (StructField f : schema.fields()) {
      columns.add(column(f));
    }
    String sql = "CREATE TABLE " + SqlText.table(qualified) + " (" + String.join(", ", columns) + ")";
    if (partitions != null && partitions.length > 0) {
      List<String> items = new ArrayList<>();
      for (Transform t : partitions) {
        items.add(transform(t));
      }
      sql += " PARTITIONED BY (" + String.join(", ", items) + ")";
    }
    return sql;
  }

  private static String column(StructField f) {
    return SqlText.identifier(f.name()) + " " + sqlType(f.dataType(), f.name()) + (f.nullable() ? "" : " NOT NULL");
  }

  /** A Spark partition transform as the server's PARTITIONED BY item: identity, years, months,
   * days, hours, bucket(n, c), truncate(w, c). */
  static String transform(Transform t) {
    String name = t.name().toLowerCase(Locale.ROOT);
    List<String> literals = new ArrayList<>();
    List<String> references = new ArrayList<>();
    for (Expression argument : t.arguments()) {
      if (argument instanceof NamedReference) {
        String[] parts = ((NamedReference) argument).fieldNames();
        if (parts.length != 1) {
          throw new IllegalArgumentException("partition transform " + t.describe() + ": nested columns are not supported");
        }
        references.add(SqlText.identifier(parts[0]));
      } else if (argument instanceof Literal) {
        literals.add(String.valueOf(((Literal<?>) argument).value()));
      } else {
        throw new IllegalArgumentException("partition transform " + t.describe() + " is not supported");
      }
    }
    if (references.size() != 1) {
      throw new IllegalArgumentException("partition transform " + t.describe() + " must name one column");
    }
    switch (name) {
      case "identity":
        return references.get(0);
      case "years": case "year": case "months": case "month": case "days": case "day": case "hours": case "hour":
        return name.replaceAll("s$", "") + "(" + references.get(0) + ")";
      case "bucket": case "truncate":
        if (literals.size() != 1) {
          throw new IllegalArgumentException("partition transform " + t.describe() + " needs one number");
        }
        return name + "(" + literals.get(0) + ", " + references.get(0) + ")";
      default:
        throw new IllegalArgumentException("partition transform " + t.describe()
            + " is not supported (identity, years, months, days, hours, bucket, truncate are)");
    }
  }

  /** The ALTER TABLE statements of Spark's table changes, one action per statement. */
  static List<String> alterTable(String qualified, TableChange[] changes) {
    String target = "ALTER TABLE " + SqlText.table(qualified) + " ";
    List<String> out = new ArrayList<>();
    for (TableChange change : changes) {
      if (change instanceof TableChange.AddColumn) {
        TableChange.AddColumn add = (TableChange.AddColumn) change;
        String name = topLevel(add.fieldNames(), "ADD COLUMN");
        if (add.position() != null || add.defaultValue() != null) {
          throw new UnsupportedOperationException("ADD COLUMN " + name + ": FIRST / AFTER / DEFAULT are not supported");
        }
        out.add(target + "ADD COLUMN " + SqlText.identifier(name) + " " + sqlType(add.dataType(), name)
            + (add.isNullable() ? "" : " NOT NULL"));
      } else if (change instanceof TableChange.DeleteColumn) {
        TableChange.DeleteColumn drop = (TableChange.DeleteColumn) change;
        out.add(target + "DROP COLUMN " + (drop.ifExists() ? "IF EXISTS " : "")
            + SqlText.identifier(topLevel(drop.fieldNames(), "DROP COLUMN")));
      } else if (change instanceof TableChange.RenameColumn) {
        TableChange.RenameColumn rename = (TableChange.RenameColumn) change;
        out.add(target + "RENAME COLUMN " + SqlText.identifier(topLevel(rename.fieldNames(), "RENAME COLUMN"))
            + " TO " + SqlText.identifier(rename.newName()));
      } else if (change instanceof TableChange.UpdateColumnType) {
        TableChange.UpdateColumnType update = (TableChange.UpdateColumnType) change;
        String name = topLevel(update.fieldNames(), "ALTER COLUMN");
        out.add(target + "ALTER COLUMN " + SqlText.identifier(name) + " TYPE " + sqlType(update.newDataType(), name));
      } else if (change instanceof TableChange.UpdateColumnNullability
          && ((TableChange.UpdateColumnNullability) change).nullable()) {
        String name = topLevel(((TableChange.UpdateColumnNullability) change).fieldNames(), "ALTER COLUMN");
        out.add(target + "ALTER COLUMN " + SqlText.identifier(name) + " DROP NOT NULL");
      } else if (change instanceof TableChange.SetProperty) {
        TableChange.SetProperty set = (TableChange.SetProperty) change;
        out.add(target + "SET (" + SqlText.string(set.property()) + " = " + SqlText.string(set.value()) + ")");
      } else {
        throw new UnsupportedOperationException("ALTER TABLE " + qualified + ": " + change.getClass().getSimpleName()
            + " is not supported (ADD / DROP / RENAME COLUMN, ALTER COLUMN TYPE, DROP NOT NULL, SET TBLPROPERTIES are)");
      }
    }
    return out;
  }

  /** {@code ALTER TABLE ns.t SET (...)} for the user's table properties, or null when none. */
  static String setProperties(String qualified, Map<String, String> properties) {
    List<String> items = new ArrayList<>();
    for (Map.Entry<String, String> e : properties.entrySet()) {
      if (!RESERVED.contains(e.getKey().toLowerCase(Locale.ROOT)) && !e.getKey().startsWith("option.")) {
        items.add(SqlText.string(e.getKey()) + " = " + SqlText.string(e.getValue()));
      }
    }
    return items.isEmpty() ? null : "ALTER TABLE " + SqlText.table(qualified) + " SET (" + String.join(", ", items) + ")";
  }

  private static String topLevel(String[] names, String what) {
    if (names.length != 1) {
      throw new UnsupportedOperationException(what + " " + String.join(".", names) + ": nested columns are not supported");
    }
    return names[0];
  }
}
