-- meta.schema_version 2
-- A small colo runs database (schema 1, as RunsDatabase writes it): the fuzz seed of the runs_db reader.
BEGIN;

CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs(
  id INTEGER PRIMARY KEY,
  started_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')),
  plan_name TEXT NOT NULL, plan_hash TEXT NOT NULL, model TEXT NOT NULL, device TEXT NOT NULL, backend TEXT NOT NULL,
  world INTEGER NOT NULL, tp INTEGER NOT NULL, pp INTEGER NOT NULL, dp INTEGER NOT NULL, vpp INTEGER NOT NULL,
  first_step INTEGER NOT NULL, tokens_per_step INTEGER NOT NULL,
  step_time_s REAL NOT NULL, tokens_per_s REAL NOT NULL, peak_memory_bytes REAL NOT NULL,
  predicted_step_time_s REAL NOT NULL, predicted_peak_memory_bytes REAL NOT NULL,
  compute_s REAL NOT NULL, wall_s REAL NOT NULL, checkpoint TEXT NOT NULL DEFAULT ''
);
CREATE TABLE steps(
  run_id INTEGER NOT NULL REFERENCES runs(id),
  step INTEGER NOT NULL, loss REAL NOT NULL, seconds REAL NOT NULL, grad_norm REAL NOT NULL,
  PRIMARY KEY (run_id, step)
);
INSERT INTO meta VALUES ('format', 'colo.runs'), ('schema_version', '1');

INSERT INTO runs(id, plan_name, plan_hash, model, device, backend, world, tp, pp, dp, vpp, first_step, tokens_per_step,
  step_time_s, tokens_per_s, peak_memory_bytes, predicted_step_time_s, predicted_peak_memory_bytes, compute_s, wall_s)
  VALUES (1, 'tiny', 'abc', 'tiny-gpt', 'cpu', 'gloo', 2, 1, 2, 1, 1, 0, 4096, 0.5, 8192, 1e8, 0.4, 9e7, 0.3, 5.0);
INSERT INTO steps VALUES (1, 0, 5.5, 0.5, 1.2), (1, 1, 5.1, 0.49, 1.1);
UPDATE meta SET value = '2' WHERE key = 'schema_version';
COMMIT;
