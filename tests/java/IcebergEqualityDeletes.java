// Writes one equality delete file with Iceberg's own Java library (GenericFileWriterFactory's
// equality delete writer) and commits it as a RowDelta through a REST catalog: what Flink CDC
// and other Iceberg-Java writers do. Used by tests/flight_server/web/test_java_equality_deletes.py.
//
// java -cp <iceberg runtime>:<hadoop jars>:<dir> IcebergEqualityDeletes URI TABLE COLS ROW...
//   COLS: comma-separated key columns (current names); ROW: values joined by '|', \N for NULL.
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.iceberg.FileFormat;
import org.apache.iceberg.Schema;
import org.apache.iceberg.Table;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.data.GenericFileWriterFactory;
import org.apache.iceberg.data.GenericRecord;
import org.apache.iceberg.data.Record;
import org.apache.iceberg.deletes.EqualityDeleteWriter;
import org.apache.iceberg.encryption.EncryptedOutputFile;
import org.apache.iceberg.io.OutputFileFactory;
import org.apache.iceberg.rest.RESTCatalog;
import org.apache.iceberg.types.Type;
import org.apache.iceberg.types.Types;

public class IcebergEqualityDeletes {
  public static void main(String[] args) throws Exception {
    RESTCatalog catalog = new RESTCatalog();
    catalog.setConf(new org.apache.hadoop.conf.Configuration());
    Map<String, String> props = new HashMap<>();
    props.put("uri", args[0]);
    props.put("io-impl", "org.apache.iceberg.hadoop.HadoopFileIO");
    catalog.initialize("icefloe", props);
    Table table = catalog.loadTable(TableIdentifier.parse(args[1]));
    Schema keys = table.schema().select(args[2].split(","));
    List<Types.NestedField> columns = keys.columns();
    int[] ids = columns.stream().mapToInt(Types.NestedField::fieldId).toArray();
    GenericFileWriterFactory writers =
        new GenericFileWriterFactory.Builder(table).equalityFieldIds(ids).equalityDeleteRowSchema(keys).build();
    EncryptedOutputFile out =
        OutputFileFactory.builderFor(table, 1, System.nanoTime()).format(FileFormat.PARQUET).build().newOutputFile();
    EqualityDeleteWriter<Record> writer = writers.newEqualityDeleteWriter(out, table.spec(), null);
    try {
      for (int i = 3; i < args.length; i++) {
        String[] values = args[i].split("\\|", -1);
        GenericRecord row = GenericRecord.create(keys);
        for (int j = 0; j < columns.size(); j++) {
          row.set(j, parse(columns.get(j).type(), values[j]));
        }
        writer.write(row);
      }
    } finally {
      writer.close();
    }
    table.newRowDelta().addDeletes(writer.toDeleteFile()).commit();
    catalog.close();
  }

  private static Object parse(Type type, String text) {
    if (text.equals("\\N")) {
      return null;
    }
    switch (type.typeId()) {
      case LONG:
        return Long.parseLong(text);
      case INTEGER:
        return Integer.parseInt(text);
      case STRING:
        return text;
      default:
        throw new IllegalArgumentException("unsupported key type " + type);
    }
  }
}
