package dev.icefloe.spark;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.aggregate.AggregateFunc;
import org.apache.spark.sql.connector.expressions.aggregate.Aggregation;
import org.apache.spark.sql.connector.expressions.aggregate.Count;
import org.apache.spark.sql.connector.expressions.aggregate.CountStar;
import org.apache.spark.sql.connector.expressions.aggregate.Max;
import org.apache.spark.sql.connector.expressions.aggregate.Min;
import org.apache.spark.sql.connector.expressions.aggregate.Sum;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownAggregates;
import org.apache.spark.sql.connector.read.SupportsPushDownLimit;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.connector.read.SupportsPushDownV2Filters;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * Builds one scan's SQL from what Spark pushes: the needed columns, the predicates that render
 * as SQL, a limit, and an aggregate the server can answer whole (COUNT, SUM, MIN, MAX, with
 * GROUP BY columns), all over the table at its pinned snapshot (or over the {@code query}).
 */
final class FlightScanBuilder implements ScanBuilder, SupportsPushDownV2Filters,
    SupportsPushDownRequiredColumns, SupportsPushDownLimit, SupportsPushDownAggregates {
  private final FlightTable table;
  private final Map<String, String> projectionOf = new HashMap<>();
  private final PredicateSql predicates;
  private StructType required;
  private final List<Predicate> pushed = new ArrayList<>();
  private final List<String> where = new ArrayList<>();
  private Integer limit;
  /** Select items and Spark schema of a pushed aggregate; null when none is pushed. */
  private List<String> aggregateItems;
  private List<String> groupBy;
  private StructType aggregateSchema;

  FlightScanBuilder(FlightTable table) {
    this.table = table;
    this.required = table.sparkSchema;
    Set<String> plain = new HashSet<>();
    StructField[] fields = table.sparkSchema.fields();
    for (int i = 0; i < fields.length; i++) {
      String name = fields[i].name();
      String projection = table.projections == null ? SqlText.identifier(name) : table.projections[i];
      projectionOf.put(name, projection);
      if (projection.equals(SqlText.identifier(name))) {
        plain.add(name); // cast columns are compared by Spark, not on their server type
      }
    }
    predicates = new PredicateSql(plain);
  }

  @Override
  public Predicate[] pushPredicates(Predicate[] offered) {
    List<Predicate> rest = new ArrayList<>();
    for (Predicate p : offered) {
      try {
        where.add(predicates.render(p));
        pushed.add(p);
      } catch (PredicateSql.Unsupported e) {
        rest.add(p);
      }
    }
    return rest.toArray(new Predicate[0]);
  }

  @Override
  public Predicate[] pushedPredicates() {
    return pushed.toArray(new Predicate[0]);
  }

  @Override
  public void pruneColumns(StructType requiredSchema) {
    if (aggregateItems == null) {
      this.required = requiredSchema;
    }
  }

  @Override
  public boolean pushLimit(int n) {
    this.limit = n;
    return true;
  }

  @Override
  public boolean supportCompletePushDown(Aggregation aggregation) {
    return renderAggregation(aggregation) != null;
  }

  @Override
  public boolean pushAggregation(Aggregation aggregation) {
    Object[] rendered = renderAggregation(aggregation);
    if (rendered == null) {
      return false;
    }
    @SuppressWarnings("unchecked")
    List<String> items = (List<String>) rendered[0];
    @SuppressWarnings("unchecked")
    List<String> groups = (List<String>) rendered[1];
    aggregateItems = items;
    groupBy = groups;
    aggregateSchema = (StructType) rendered[2];
    return true;
  }

  /** [select items, group-by items, Spark schema], or null when the server cannot answer it whole. */
  private Object[] renderAggregation(Aggregation aggregation) {
    if (!table.options.pushDownAggregate) {
      return null;
    }
    List<String> items = new ArrayList<>();
    List<String> groups = new ArrayList<>();
    List<StructField> fields = new ArrayList<>();
    try {
      int i = 0;
      for (Expression e : aggregation.groupByExpressions()) {
        String name = plainColumn(e);
        String item = SqlText.identifier(name);
        groups.add(item);
        items.add(item + " AS " + SqlText.identifier("group_col_" + i));
        fields.add(new StructField("group_col_" + i++, typeOf(name), true,
            org.apache.spark.sql.types.Metadata.empty()));
      }
      int j = 0;
      for (AggregateFunc f : aggregation.aggregateExpressions()) {
        String alias = "agg_func_" + j++;
        String sql;
        DataType type;
        if (f instanceof CountStar) {
          sql = "COUNT(*)";
          type = DataTypes.LongType;
        } else if (f instanceof Count) {
          Count c = (Count) f;
          sql = "COUNT(" + (c.isDistinct() ? "DISTINCT " : "") + SqlText.identifier(plainColumn(c.column())) + ")";
          type = DataTypes.LongType;
        } else if (f instanceof Sum) {
          Sum s = (Sum) f;
          String name = plainColumn(s.column());
          type = sumType(typeOf(name));
          sql = "SUM(" + (s.isDistinct() ? "DISTINCT " : "") + SqlText.identifier(name) + ")";
        } else if (f instanceof Min || f instanceof Max) {
          String name = plainColumn(f instanceof Min ? ((Min) f).column() : ((Max) f).column());
          type = typeOf(name);
          sql = (f instanceof Min ? "MIN(" : "MAX(") + SqlText.identifier(name) + ")";
        } else {
          return null;
        }
        // The server's SUM of BIGINT is a HUGEINT; Spark's is a long: cast to Spark's type.
        items.add("CAST(" + sql + " AS " + sqlType(type) + ") AS " + SqlText.identifier(alias));
        fields.add(new StructField(alias, type, true, org.apache.spark.sql.types.Metadata.empty()));
      }
    } catch (PredicateSql.Unsupported e) {
      return null;
    }
    return new Object[] {items, groups, new StructType(fields.toArray(new StructField[0]))};
  }

  private String plainColumn(Expression e) throws PredicateSql.Unsupported {
    if (!(e instanceof NamedReference) || ((NamedReference) e).fieldNames().length != 1) {
      throw new PredicateSql.Unsupported();
    }
    String name = ((NamedReference) e).fieldNames()[0];
    if (!projectionOf.containsKey(name) || !projectionOf.get(name).equals(SqlText.identifier(name))) {
      throw new PredicateSql.Unsupported();
    }
    return name;
  }

  private DataType typeOf(String name) {
    return table.sparkSchema.apply(name).dataType();
  }

  private static DataType sumType(DataType input) throws PredicateSql.Unsupported {
    if (input instanceof ByteType || input instanceof ShortType || input instanceof IntegerType
        || input instanceof LongType) {
      return DataTypes.LongType;
    }
    if (input instanceof FloatType || input instanceof DoubleType) {
      return DataTypes.DoubleType;
    }
    if (input instanceof DecimalType) {
      DecimalType d = (DecimalType) input;
      return DataTypes.createDecimalType(Math.min(38, d.precision() + 10), d.scale());
    }
    throw new PredicateSql.Unsupported();
  }

  private static String sqlType(DataType type) throws PredicateSql.Unsupported {
    if (type instanceof LongType) {
      return "BIGINT";
    }
    if (type instanceof DoubleType) {
      return "DOUBLE";
    }
    if (type instanceof DecimalType) {
      DecimalType d = (DecimalType) type;
      return "DECIMAL(" + d.precision() + ", " + d.scale() + ")";
    }
    String name = type.sql(); // MIN/MAX keep the column's own type
    switch (name) {
      case "TINYINT": case "SMALLINT": case "INT": case "BIGINT": case "FLOAT": case "DOUBLE":
      case "BOOLEAN": case "STRING": case "DATE": case "TIMESTAMP": case "TIMESTAMP_NTZ": case "BINARY":
        return name.equals("INT") ? "INTEGER" : name.equals("STRING") ? "VARCHAR"
            : name.equals("TIMESTAMP") ? "TIMESTAMPTZ" : name.equals("TIMESTAMP_NTZ") ? "TIMESTAMP"
            : name.equals("BINARY") ? "BLOB" : name;
      default:
        throw new PredicateSql.Unsupported();
    }
  }

  @Override
  public Scan build() {
    return new FlightScan(table.options, sql(), readSchema(), pushed.size(), limit, aggregateItems != null);
  }

  private StructType readSchema() {
    return aggregateItems != null ? aggregateSchema : required;
  }

  /** The one statement this scan runs. */
  String sql() {
    List<String> conditions = new ArrayList<>(where);
    String from;
    if (table.options.query != null) {
      from = "(" + table.options.query + ") AS q";
    } else {
      from = table.fromItem();
      if (table.snapshotId != null && table.snapshotId == FlightTable.EMPTY) {
        conditions.add("FALSE");
      }
    }
    String select;
    if (aggregateItems != null) {
      select = String.join(", ", aggregateItems);
    } else if (required.fields().length == 0) {
      select = "1 AS " + SqlText.identifier("_"); // count(*) with nothing pushed: rows, no columns
    } else {
      List<String> items = new ArrayList<>();
      for (StructField f : required.fields()) {
        items.add(projectionOf.get(f.name()));
      }
      select = String.join(", ", items);
    }
    StringBuilder sql = new StringBuilder("SELECT ").append(select).append(" FROM ").append(from);
    if (!conditions.isEmpty()) {
      sql.append(" WHERE ");
      for (int i = 0; i < conditions.size(); i++) {
        sql.append(i == 0 ? "(" : " AND (").append(conditions.get(i)).append(")");
      }
    }
    if (aggregateItems != null && !groupBy.isEmpty()) {
      sql.append(" GROUP BY ").append(String.join(", ", groupBy));
    }
    if (limit != null) {
      sql.append(" LIMIT ").append(limit);
    }
    return sql.toString();
  }
}
