package org.apache.iceberg.rest;

import java.util.Map;
import org.apache.iceberg.catalog.CatalogTests;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;

/** Iceberg's CatalogTests through RESTCatalog against icefloe. */
public class IcefloeCatalogTests extends CatalogTests<RESTCatalog> {
  private static RESTCatalog shared;

  @BeforeAll
  static void openCatalog() {
    shared = IcefloeCatalogs.open(Map.of());
  }

  @AfterAll
  static void closeCatalog() throws Exception {
    shared.close();
  }

  @BeforeEach
  void startClean() {
    IcefloeCatalogs.dropSuiteNamespaces(shared);
  }

  @Override
  protected RESTCatalog catalog() {
    return shared;
  }

  @Override
  protected RESTCatalog initCatalog(String catalogName, Map<String, String> additionalProperties) {
    return IcefloeCatalogs.open(additionalProperties);
  }

  // icefloe namespaces must be created before tables go into them.
  @Override
  protected boolean requiresNamespaceCreate() {
    return true;
  }

  // A stale-base append is rebased and retried by the server's commit path.
  @Override
  protected boolean supportsServerSideRetry() {
    return true;
  }

  // Namespaces have any number of levels.
  @Override
  protected boolean supportsNestedNamespaces() {
    return true;
  }

  // Names become folder names and SQL identifiers (`ns.table`, multi-level namespaces joined
  // with '.'), so '/' and '.' are refused in names (400) by design.
  @Override
  protected boolean supportsNamesWithSlashes() {
    return false;
  }

  @Override
  protected boolean supportsNamesWithDot() {
    return false;
  }

  // Locations outside the warehouse are refused, not overridden (the sandbox).
  @Override
  protected boolean overridesRequestedLocation() {
    return false;
  }
}
