-- gemms.m is text
-- A small colo cost database (schema 3, as CostDatabase::create writes it): the fuzz seed of the cost_db
-- reader. Load with: sqlite3 costs.sqlite < cost_db.sql
BEGIN;

CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE devices(
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,          -- e.g. "NVIDIA H100 80GB HBM3" or "cpu: AMD EPYC ..."
  fingerprint TEXT NOT NULL DEFAULT '' -- driver/library versions, clocks
);
CREATE TABLE gemms(
  device_id INTEGER NOT NULL REFERENCES devices(id),
  dtype TEXT NOT NULL,
  m INTEGER NOT NULL, n INTEGER NOT NULL, k INTEGER NOT NULL,
  median_s REAL NOT NULL CHECK (median_s > 0),
  spread_s REAL NOT NULL DEFAULT 0,
  repetitions INTEGER NOT NULL DEFAULT 1,
  measured_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')),
  PRIMARY KEY (device_id, dtype, m, n, k)
);
INSERT INTO meta VALUES ('format', 'colo.costdb'), ('schema_version', '1');

CREATE TABLE kernels(
  device_id INTEGER NOT NULL REFERENCES devices(id),
  op TEXT NOT NULL, dtype TEXT NOT NULL, shape TEXT NOT NULL, impl TEXT NOT NULL DEFAULT '',
  median_s REAL NOT NULL CHECK (median_s > 0),
  spread_s REAL NOT NULL DEFAULT 0,
  repetitions INTEGER NOT NULL DEFAULT 1,
  measured_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')),
  PRIMARY KEY (device_id, op, dtype, shape, impl)
);
CREATE TABLE collectives(
  device_id INTEGER NOT NULL REFERENCES devices(id),
  op TEXT NOT NULL, backend TEXT NOT NULL, world INTEGER NOT NULL CHECK (world > 0),
  link_level TEXT NOT NULL, bytes INTEGER NOT NULL CHECK (bytes >= 0),
  median_s REAL NOT NULL CHECK (median_s > 0),
  spread_s REAL NOT NULL DEFAULT 0,
  repetitions INTEGER NOT NULL DEFAULT 1,
  measured_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')),
  PRIMARY KEY (device_id, op, backend, world, link_level, bytes)
);
UPDATE meta SET value = '2' WHERE key = 'schema_version';

CREATE TABLE copies(
  device_id INTEGER NOT NULL REFERENCES devices(id),
  direction TEXT NOT NULL CHECK (direction IN ('h2d', 'd2h')),
  pinned INTEGER NOT NULL CHECK (pinned IN (0, 1)),
  bytes INTEGER NOT NULL CHECK (bytes > 0),
  median_s REAL NOT NULL CHECK (median_s > 0),
  spread_s REAL NOT NULL DEFAULT 0,
  repetitions INTEGER NOT NULL DEFAULT 1,
  measured_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')),
  PRIMARY KEY (device_id, direction, pinned, bytes)
);
UPDATE meta SET value = '3' WHERE key = 'schema_version';

INSERT INTO devices(id, name, fingerprint) VALUES (1, 'NVIDIA H100 80GB HBM3', 'driver 535'), (2, 'cpu: fuzz', '');
INSERT INTO gemms(device_id, dtype, m, n, k, median_s) VALUES (1, 'bf16', 1024, 1024, 1024, 0.00002), (1, 'bf16', 4096, 4096, 4096, 0.0012), (2, 'fp32', 64, 64, 64, 0.0001);
INSERT INTO kernels(device_id, op, dtype, shape, impl, median_s) VALUES (1, 'layernorm.fwd', 'bf16', '8192x768', 'aten', 0.00001), (1, 'adam_step.fwd', 'fp32', '1000000x1', 'fused', 0.0002);
INSERT INTO collectives(device_id, op, backend, world, link_level, bytes, median_s) VALUES (1, 'all_reduce', 'nccl', 8, 'nvlink', 1048576, 0.00005);
INSERT INTO copies(device_id, direction, pinned, bytes, median_s) VALUES (1, 'h2d', 1, 1048576, 0.00004);
UPDATE gemms SET m = 'abc' WHERE m = 64;
COMMIT;
