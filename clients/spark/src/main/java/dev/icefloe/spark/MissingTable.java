package dev.icefloe.spark;

import java.util.EnumSet;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A table the format's options name that does not exist (yet): a write creates it from the
 * DataFrame's schema on the driver (Spark's append and overwrite of a missing table), a read
 * fails with the server's NOT_FOUND.
 */
final class MissingTable implements SupportsRead, SupportsWrite {
  private final FlightOptions options;
  private final String notFound;

  MissingTable(FlightOptions options, String notFound) {
    this.options = options;
    this.notFound = notFound;
  }

  @Override
  public String name() {
    return options.table;
  }

  @Override
  public StructType schema() {
    return new StructType();
  }

  @Override
  public Set<TableCapability> capabilities() {
    // Any schema: the rows' own schema becomes the table's.
    return EnumSet.of(TableCapability.BATCH_READ, TableCapability.BATCH_WRITE, TableCapability.TRUNCATE,
        TableCapability.ACCEPT_ANY_SCHEMA);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap scanOptions) {
    throw new IcefloeFlightException(notFound);
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    return new StagedWriteBuilder(options, info, true);
  }
}
