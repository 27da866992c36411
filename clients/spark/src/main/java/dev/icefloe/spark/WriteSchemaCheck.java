package dev.icefloe.spark;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * The driver's check of a write's rows against the table, before any task stages a byte: every
 * column must exist in the table, under a type the server stores without loss (the same type,
 * or a narrower integer / float). Spark checks batch writes to a table it resolved; a streaming
 * sink and a DataFrame written with a mode that does not resolve the table get the same check here.
 */
final class WriteSchemaCheck {
  private WriteSchemaCheck() {}

  static void check(String table, StructType rows, Schema tableSchema) {
    Map<String, Field> columns = new TreeMap<>(String.CASE_INSENSITIVE_ORDER);
    for (Field f : tableSchema.getFields()) {
      columns.put(f.getName(), f);
    }
    List<String> problems = new ArrayList<>();
    for (StructField f : rows.fields()) {
      Field column = columns.get(f.name());
      if (column == null) {
        problems.add("column " + f.name() + " is not in the table (its columns: "
            + String.join(", ", columns.keySet()) + ")");
        continue;
      }
      DataType target = ArrowSparkTypes.sparkType(column);
      if (!fits(f.dataType(), target)) {
        problems.add("column " + f.name() + " is " + f.dataType().catalogString() + " but the table stores "
            + target.catalogString());
      }
    }
    if (!problems.isEmpty()) {
      throw new IllegalArgumentException("cannot write to " + table + ": " + String.join("; ", problems));
    }
  }

  static boolean fits(DataType from, DataType to) {
    if (from.sameType(to)) {
      return true;
    }
    int a = integerRank(from);
    int b = integerRank(to);
    if (a > 0 && b > 0) {
      return a <= b;
    }
    if (from instanceof FloatType && to instanceof DoubleType) {
      return true;
    }
    if (from instanceof DecimalType && to instanceof DecimalType) {
      DecimalType x = (DecimalType) from;
      DecimalType y = (DecimalType) to;
      return x.scale() == y.scale() && x.precision() <= y.precision();
    }
    // Strings, nested types, timestamps: the server decides (by the names and types it compares).
    return from.typeName().toLowerCase(Locale.ROOT).equals(to.typeName().toLowerCase(Locale.ROOT))
        || (from instanceof StructType || to instanceof StructType) == false && isNested(from) && isNested(to);
  }

  private static boolean isNested(DataType t) {
    return t instanceof org.apache.spark.sql.types.ArrayType || t instanceof org.apache.spark.sql.types.MapType;
  }

  private static int integerRank(DataType t) {
    if (t instanceof ByteType) {
      return 1;
    }
    if (t instanceof ShortType) {
      return 2;
    }
    if (t instanceof IntegerType) {
      return 3;
    }
    if (t instanceof LongType) {
      return 4;
    }
    return 0;
  }
}
