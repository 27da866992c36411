package org.apache.iceberg.rest;

import java.util.Map;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.view.ViewCatalogTests;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;

/** Iceberg's ViewCatalogTests through RESTCatalog against icefloe. */
public class IcefloeViewCatalogTests extends ViewCatalogTests<RESTCatalog> {
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
  protected Catalog tableCatalog() {
    return shared;
  }

  @Override
  protected boolean requiresNamespaceCreate() {
    return true;
  }

  @Override
  protected boolean supportsServerSideRetry() {
    return true;
  }

  @Override
  protected boolean overridesRequestedLocation() {
    return false;
  }
}
