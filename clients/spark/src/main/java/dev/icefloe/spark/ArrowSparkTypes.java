package dev.icefloe.spark;

import java.util.ArrayList;
import java.util.List;
import org.apache.arrow.vector.types.DateUnit;
import org.apache.arrow.vector.types.FloatingPointPrecision;
import org.apache.arrow.vector.types.TimeUnit;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.ArrowUtils;

/**
 * Which Arrow columns Spark's {@code ArrowColumnVector} reads as they arrive, and the SQL that
 * makes the server send the rest in a form it does read.
 *
 * <p>Reads are zero-copy, so a column must come off the wire in a vector type Spark knows:
 * signed integers, floats, decimal128, utf8/binary (and large), date32, timestamp[us] (with or
 * without zone), list, struct, map. The server casts everything else in the scan's SQL:
 * {@code time64[us]} and UUIDs as text (Spark 4.1 reads only nanosecond times; SQL shows UUIDs
 * as text), fixed-size binary as binary, unsigned integers to the next wider signed type,
 * timestamps of other units to microseconds.
 */
final class ArrowSparkTypes {
  private ArrowSparkTypes() {}

  /** The SQL select item for column {@code field}, cast when Spark cannot read it as sent. */
  static String projection(Field field) {
    String column = SqlText.identifier(field.getName());
    String cast = castFor(field);
    return cast == null ? column : "CAST(" + column + " AS " + cast + ") AS " + column;
  }

  private static String castFor(Field field) {
    if (isNative(field)) {
      return null;
    }
    ArrowType type = field.getType();
    if (type instanceof ArrowType.Int) {
      ArrowType.Int t = (ArrowType.Int) type;
      switch (t.getBitWidth()) {
        case 8: return "SMALLINT";
        case 16: return "INTEGER";
        case 32: return "BIGINT";
        default: return "DECIMAL(20, 0)";
      }
    }
    if (type instanceof ArrowType.FixedSizeBinary && !isUuid(field)) {
      return "BLOB";
    }
    if (type instanceof ArrowType.Timestamp) {
      return ((ArrowType.Timestamp) type).getTimezone() == null ? "TIMESTAMP" : "TIMESTAMPTZ";
    }
    if (type instanceof ArrowType.Date) {
      return "DATE";
    }
    return "VARCHAR";
  }

  private static boolean isUuid(Field field) {
    String name = field.getMetadata().get("ARROW:extension:name");
    return "arrow.uuid".equals(name) || field.getType() instanceof ArrowType.ExtensionType;
  }

  /** True when {@code ArrowColumnVector} reads this field's vectors as they arrive. */
  static boolean isNative(Field field) {
    if (field.getMetadata().containsKey("ARROW:extension:name") || field.getDictionary() != null) {
      return false;
    }
    ArrowType type = field.getType();
    switch (type.getTypeID()) {
      case Bool: case Utf8: case LargeUtf8: case Binary: case LargeBinary: case Null:
        return true;
      case Int:
        return ((ArrowType.Int) type).getIsSigned();
      case FloatingPoint:
        return ((ArrowType.FloatingPoint) type).getPrecision() != FloatingPointPrecision.HALF;
      case Decimal:
        return ((ArrowType.Decimal) type).getBitWidth() == 128;
      case Date:
        return ((ArrowType.Date) type).getUnit() == DateUnit.DAY;
      case Timestamp:
        return ((ArrowType.Timestamp) type).getUnit() == TimeUnit.MICROSECOND;
      case List: case LargeList: case Struct: case Map:
        for (Field child : field.getChildren()) {
          if (!isNative(child)) {
            return false;
          }
        }
        return true;
      default:
        return false;
    }
  }

  /** The Spark type Spark reads this Arrow field as. */
  static DataType sparkType(Field field) {
    return ArrowUtils.fromArrowSchema(new Schema(List.of(field))).fields()[0].dataType();
  }

  /** The Spark schema of an Arrow schema, every column nullable (a later snapshot may hold
   * nulls where an earlier schema said required; a stricter Spark schema would fail that read). */
  static StructType sparkSchema(Schema schema) {
    List<StructField> fields = new ArrayList<>();
    for (Field field : schema.getFields()) {
      fields.add(new StructField(field.getName(), sparkType(field), true,
          org.apache.spark.sql.types.Metadata.empty()));
    }
    return new StructType(fields.toArray(new StructField[0]));
  }
}
