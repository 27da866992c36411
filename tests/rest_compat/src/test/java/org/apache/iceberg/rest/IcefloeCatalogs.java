package org.apache.iceberg.rest;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.catalog.Namespace;

/** Opens Iceberg-Java's RESTCatalog on the icefloe server named by -Dicefloe.rest.uri. */
final class IcefloeCatalogs {
  private IcefloeCatalogs() {}

  static RESTCatalog open(Map<String, String> extra) {
    Map<String, String> properties = new HashMap<>();
    properties.put(CatalogProperties.URI, System.getProperty("icefloe.rest.uri"));
    // The suites assume a catalog configured with these default and override properties
    // (tables and views alike); Iceberg's own runs of the suites configure them the same way.
    properties.put("table-default.default-key1", "catalog-default-key1");
    properties.put("table-default.default-key2", "catalog-default-key2");
    properties.put("table-override.override-key3", "catalog-override-key3");
    properties.put("table-override.override-key4", "catalog-override-key4");
    properties.put("view-default.key1", "catalog-default-key1");
    properties.put("view-default.key2", "catalog-default-key2");
    properties.put("view-override.key3", "catalog-override-key3");
    properties.put("view-override.key4", "catalog-override-key4");
    properties.putAll(extra);
    RESTCatalog catalog = new RESTCatalog();
    catalog.setConf(hadoopConfiguration());
    catalog.initialize("icefloe", properties);
    return catalog;
  }

  // Hadoop is on the run's classpath only (pyspark's client jars), not the compile's: the
  // client-side FileIO for file:// tables is HadoopFileIO, which needs a Configuration.
  private static Object hadoopConfiguration() {
    try {
      return Class.forName("org.apache.hadoop.conf.Configuration").getDeclaredConstructor().newInstance();
    } catch (ReflectiveOperationException e) {
      throw new IllegalStateException("Hadoop's client jars are not on the classpath", e);
    }
  }

  /** Drops every namespace (deepest first) but icefloe's always-present `default`, with its
   * tables and views: each test starts from an empty catalog, as the suites assume. */
  static void dropSuiteNamespaces(RESTCatalog catalog) {
    List<Namespace> all = new ArrayList<>();
    collect(catalog, Namespace.empty(), all);
    all.sort(Comparator.comparingInt((Namespace n) -> n.levels().length).reversed());
    for (Namespace namespace : all) {
      catalog.listTables(namespace).forEach(catalog::dropTable);
      catalog.listViews(namespace).forEach(catalog::dropView);
      if (!namespace.equals(Namespace.of("default"))) {
        catalog.dropNamespace(namespace);
      }
    }
  }

  private static void collect(RESTCatalog catalog, Namespace parent, List<Namespace> into) {
    for (Namespace child : catalog.listNamespaces(parent)) {
      into.add(child);
      collect(catalog, child, into);
    }
  }
}
