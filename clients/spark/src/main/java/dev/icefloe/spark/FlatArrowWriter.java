package dev.icefloe.spark;

import java.nio.ByteOrder;
import java.util.List;
import org.apache.arrow.vector.BaseFixedWidthVector;
import org.apache.arrow.vector.BaseVariableWidthVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Spark rows into a reused {@link VectorSchemaRoot} of flat columns, for the write path.
 *
 * <p>Why not Spark's {@code ArrowWriter}: it makes a virtual call per value through a writer
 * per column, and each {@code setSafe} checks capacity, sets the validity bit and the value
 * with bounds checks of its own; in a 10M-row write that was most of the executors' CPU. Here
 * the buffers are allocated once for a whole batch ({@code capacity} rows), a row is one pass
 * over a switch on each column's kind, and values are stored straight at the buffers'
 * addresses. Only variable-width data can outgrow its buffer, which is checked per value.
 *
 * <p>Flat columns only (booleans, integers, floats, decimals up to 18 digits, dates,
 * timestamps, strings, binary): {@link #create} answers null for anything else (nested types,
 * wide decimals) and the caller uses Spark's writer.
 */
final class FlatArrowWriter {
  private static final int BOOL = 0;
  private static final int BYTE = 1;
  private static final int SHORT = 2;
  private static final int INT = 3;
  private static final int LONG = 4;
  private static final int FLOAT = 5;
  private static final int DOUBLE = 6;
  private static final int DECIMAL64 = 7;
  private static final int STRING = 8;
  private static final int BINARY = 9;
  /** Bytes per value in the fixed-width buffers, by kind (a boolean is a bit: counted 0;
   * strings and binary: their offset). */
  private static final int[] FIXED_BYTES = {0, 1, 2, 4, 8, 4, 8, 16, 4, 4};
  /** A first guess of a string column's bytes per value; the buffer doubles when it is short. */
  private static final int INITIAL_BYTES_PER_VALUE = 16;
  /** Up to this many bytes a value is copied in a loop rather than by Unsafe.copyMemory. */
  private static final int SHORT_COPY_BYTES = 32;

  private final VectorSchemaRoot root;
  private final FieldVector[] vectors;
  private final int[] kinds;
  private final int[] decimalPrecision;
  private final int[] decimalScale;
  private final int capacity;
  /** Per column: the validity, data and (variable width) offset buffers' addresses. */
  private final long[] validity;
  private final long[] data;
  private final long[] offsets;
  /** Per variable-width column: bytes written and the data buffer's capacity. */
  private final long[] dataUsed;
  private final long[] dataCapacity;
  /** Bytes a row takes in the fixed-width buffers (values and variable-width offsets). */
  private final long fixedRowBytes;
  /** Bytes of variable-width data in the batch, all columns. */
  private long variableBytes;
  private int count;

  private FlatArrowWriter(VectorSchemaRoot root, int[] kinds, int[] precision, int[] scale, int capacity) {
    this.root = root;
    List<FieldVector> list = root.getFieldVectors();
    this.vectors = list.toArray(new FieldVector[0]);
    this.kinds = kinds;
    this.decimalPrecision = precision;
    this.decimalScale = scale;
    this.capacity = capacity;
    int n = kinds.length;
    validity = new long[n];
    data = new long[n];
    offsets = new long[n];
    dataUsed = new long[n];
    dataCapacity = new long[n];
    long fixed = 0;
    for (int kind : kinds) {
      fixed += FIXED_BYTES[kind];
    }
    fixedRowBytes = fixed;
    for (int c = 0; c < n; c++) {
      if (isVariable(c)) {
        ((BaseVariableWidthVector) vectors[c]).allocateNew((long) capacity * INITIAL_BYTES_PER_VALUE, capacity);
      } else {
        ((BaseFixedWidthVector) vectors[c]).allocateNew(capacity);
      }
      addresses(c);
    }
    reset();
  }

  /** A writer over {@code root} (built from {@code schema} by {@code ArrowUtils}) for batches
   * of at most {@code capacity} rows, or null when a column is not flat or the machine is not
   * little-endian (Arrow's byte order). */
  static FlatArrowWriter create(VectorSchemaRoot root, StructType schema, int capacity) {
    if (ByteOrder.nativeOrder() != ByteOrder.LITTLE_ENDIAN || root.getFieldVectors().size() != schema.length()) {
      return null;
    }
    int n = schema.length();
    int[] kinds = new int[n];
    int[] precision = new int[n];
    int[] scale = new int[n];
    for (int c = 0; c < n; c++) {
      DataType type = schema.fields()[c].dataType();
      Integer kind = kindOf(type);
      FieldVector vector = root.getFieldVectors().get(c);
      if (kind == null) {
        return null;
      }
      boolean variable = kind == STRING || kind == BINARY;
      if (variable ? !(vector instanceof BaseVariableWidthVector) : !(vector instanceof BaseFixedWidthVector)) {
        return null;
      }
      kinds[c] = kind;
      if (type instanceof DecimalType) {
        precision[c] = ((DecimalType) type).precision();
        scale[c] = ((DecimalType) type).scale();
      }
    }
    return new FlatArrowWriter(root, kinds, precision, scale, capacity);
  }

  private static Integer kindOf(DataType type) {
    if (type instanceof BooleanType) {
      return BOOL;
    }
    if (type instanceof ByteType) {
      return BYTE;
    }
    if (type instanceof ShortType) {
      return SHORT;
    }
    if (type instanceof IntegerType || type instanceof DateType) {
      return INT;
    }
    if (type instanceof LongType || type instanceof TimestampType || type instanceof TimestampNTZType) {
      return LONG;
    }
    if (type instanceof FloatType) {
      return FLOAT;
    }
    if (type instanceof DoubleType) {
      return DOUBLE;
    }
    if (type instanceof DecimalType && ((DecimalType) type).precision() <= 18) {
      return DECIMAL64;
    }
    // A collated string is still a StringType; its bytes are UTF-8 either way.
    if (type instanceof StringType) {
      return STRING;
    }
    if (type instanceof BinaryType) {
      return BINARY;
    }
    return null;
  }

  private boolean isVariable(int c) {
    return kinds[c] == STRING || kinds[c] == BINARY;
  }

  private void addresses(int c) {
    FieldVector vector = vectors[c];
    validity[c] = vector.getValidityBufferAddress();
    data[c] = vector.getDataBufferAddress();
    if (isVariable(c)) {
      offsets[c] = vector.getOffsetBufferAddress();
      dataCapacity[c] = vector.getDataBuffer().capacity();
    }
  }

  /** Rows written since the last {@link #reset}. */
  int count() {
    return count;
  }

  /** Bytes of Arrow data the batch holds so far (validity bitmaps not counted). */
  long bytes() {
    return count * fixedRowBytes + variableBytes;
  }

  void write(InternalRow row) {
    int i = count;
    if (i >= capacity) {
      throw new IllegalStateException("a batch holds at most " + capacity + " rows; finish and reset it first");
    }
    for (int c = 0; c < kinds.length; c++) {
      int kind = kinds[c];
      if (row.isNullAt(c)) {
        if (kind == STRING || kind == BINARY) {
          Platform.putInt(null, offsets[c] + 4L * (i + 1), (int) dataUsed[c]);
        }
        continue; // the validity bit stays 0
      }
      long validityByte = validity[c] + (i >>> 3);
      Platform.putByte(null, validityByte, (byte) (Platform.getByte(null, validityByte) | (1 << (i & 7))));
      switch (kind) {
        case LONG:
          Platform.putLong(null, data[c] + 8L * i, row.getLong(c));
          break;
        case INT:
          Platform.putInt(null, data[c] + 4L * i, row.getInt(c));
          break;
        case DOUBLE:
          Platform.putDouble(null, data[c] + 8L * i, row.getDouble(c));
          break;
        case STRING: {
          UTF8String s = row.getUTF8String(c);
          int bytes = s.numBytes();
          long at = reserve(c, bytes);
          copy(s.getBaseObject(), s.getBaseOffset(), data[c] + at, bytes);
          Platform.putInt(null, offsets[c] + 4L * (i + 1), (int) (at + bytes));
          break;
        }
        case BINARY: {
          byte[] b = row.getBinary(c);
          long at = reserve(c, b.length);
          Platform.copyMemory(b, Platform.BYTE_ARRAY_OFFSET, null, data[c] + at, b.length);
          Platform.putInt(null, offsets[c] + 4L * (i + 1), (int) (at + b.length));
          break;
        }
        case FLOAT:
          Platform.putFloat(null, data[c] + 4L * i, row.getFloat(c));
          break;
        case SHORT:
          Platform.putShort(null, data[c] + 2L * i, row.getShort(c));
          break;
        case BYTE:
          Platform.putByte(null, data[c] + i, row.getByte(c));
          break;
        case BOOL:
          if (row.getBoolean(c)) {
            long dataByte = data[c] + (i >>> 3);
            Platform.putByte(null, dataByte, (byte) (Platform.getByte(null, dataByte) | (1 << (i & 7))));
          }
          break;
        case DECIMAL64: {
          // Arrow's decimal128 is 16 little-endian bytes: the unscaled value, sign-extended.
          long unscaled = row.getDecimal(c, decimalPrecision[c], decimalScale[c]).toUnscaledLong();
          Platform.putLong(null, data[c] + 16L * i, unscaled);
          Platform.putLong(null, data[c] + 16L * i + 8, unscaled >> 63);
          break;
        }
        default:
          throw new IllegalStateException("unknown column kind " + kind);
      }
    }
    count = i + 1;
  }

  /** Copy {@code bytes} from (base, offset) to an address. Short values (most strings) byte by
   * byte: {@code Unsafe.copyMemory}'s fixed cost was most of a write task's profile for 4- to
   * 8-byte strings. Never reads past the source's end (it may be the end of an array). */
  private static void copy(Object base, long offset, long address, int bytes) {
    if (bytes > SHORT_COPY_BYTES) {
      Platform.copyMemory(base, offset, null, address, bytes);
      return;
    }
    int k = 0;
    for (; k + 8 <= bytes; k += 8) {
      Platform.putLong(null, address + k, Platform.getLong(base, offset + k));
    }
    for (; k < bytes; k++) {
      Platform.putByte(null, address + k, Platform.getByte(base, offset + k));
    }
  }

  /** Room for {@code bytes} more in variable-width column {@code c}; answers where they go. */
  private long reserve(int c, int bytes) {
    long at = dataUsed[c];
    long need = at + bytes;
    if (need > Integer.MAX_VALUE) {
      throw new IcefloeFlightException(
          "a write batch's column holds more than 2 GiB; lower option writeBatchRows or writeBatchBytes");
    }
    if (need > dataCapacity[c]) {
      BaseVariableWidthVector vector = (BaseVariableWidthVector) vectors[c];
      vector.reallocDataBuffer(Math.max(need, 2 * dataCapacity[c]));
      addresses(c);
    }
    dataUsed[c] = need;
    variableBytes += bytes;
    return at;
  }

  /** Close the batch: the vectors' value counts and the root's row count. */
  void finish() {
    for (int c = 0; c < vectors.length; c++) {
      if (isVariable(c)) {
        // Every offset up to count was written; without this setValueCount would "fill holes"
        // from the vector's own last-set index and overwrite them.
        ((BaseVariableWidthVector) vectors[c]).setLastSet(count - 1);
      }
      vectors[c].setValueCount(count);
    }
    root.setRowCount(count);
  }

  /** Start the next batch in the same buffers (already sent: a DoPut copies a batch out
   * before {@code putNext} returns). */
  void reset() {
    for (int c = 0; c < vectors.length; c++) {
      FieldVector vector = vectors[c];
      vector.getValidityBuffer().setZero(0, vector.getValidityBuffer().capacity());
      if (kinds[c] == BOOL) {
        vector.getDataBuffer().setZero(0, vector.getDataBuffer().capacity());
      }
      if (isVariable(c)) {
        Platform.putInt(null, offsets[c], 0);
        dataUsed[c] = 0;
      }
    }
    variableBytes = 0;
    count = 0;
  }
}
