// `playbook run --secret NAME=DIR --config-map NAME=DIR`, the built command in a real process:
// the tasks read the values as a pod's would, the printed Playbook holds none of them, and a
// reference with no source ends the run before its first task, naming each one.
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { startCli, writePlaybook } from "../support/cli.js";

const dir = mkdtempSync(path.join(tmpdir(), "pb-sources-"));
const folder = (name: string, files: Record<string, string>) => {
  const at = path.join(dir, name);
  mkdirSync(at, { recursive: true });
  for (const [key, value] of Object.entries(files)) writeFileSync(path.join(at, key), value);
  return at;
};
const SECRET_VALUE = "s3cr3t-only-in-the-folder";
const db = folder("db", { password: SECRET_VALUE, user: "backup" });
const cfg = folder("cfg", { region: "eu-west" });

const manifest = (tasks: unknown[]) =>
  writePlaybook(path.join(dir, `pb-${Math.random().toString(36).slice(2)}.yaml`), "local", tasks);

const dump = {
  name: "dump",
  run: 'test "$PGPASSWORD" = "$EXPECTED" && echo "user=$DB_user region=$region pod=$POD optional=[$OPT]"',
  env: [
    { name: "EXPECTED", value: SECRET_VALUE },
    { name: "PGPASSWORD", valueFrom: { secretKeyRef: { name: "db", key: "password" } } },
    { name: "POD", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } },
    { name: "OPT", valueFrom: { secretKeyRef: { name: "absent", key: "x", optional: true } } },
  ],
  envFrom: [{ secretRef: { name: "db" }, prefix: "DB_" }, { configMapRef: { name: "cfg" } }],
};

describe("playbook run with --secret and --config-map", () => {
  it("gives each task the values its env names, and prints none in the Playbook", async () => {
    const result = await startCli([
      "run",
      "-f",
      manifest([
        {
          ...dump,
          // The Secret's user reached the task (it compares) and prints masked (secret-mask.ts).
          run: 'test "$DB_user" = backup && echo "user=$DB_user region=$region pod=$POD optional=[$OPT]"',
          env: dump.env.slice(1),
        },
      ]),
      "--secret",
      `db=${db}`,
      "--config-map",
      `cfg=${cfg}`,
      "-o",
      "json",
    ]);
    expect(result.stderr).toContain("[dump] user=*** region=eu-west pod=local optional=[]");
    expect(result.stderr).not.toContain("backup");
    expect(result.code).toBe(0);
    expect(result.stdout).not.toContain(SECRET_VALUE);
    expect(JSON.parse(result.stdout).spec.tasks[0].env[0]).toEqual({
      name: "PGPASSWORD",
      value: "",
      valueFrom: { secretKeyRef: { name: "db", key: "password" } },
    });
  });

  it("passes the Secret's value to the task exactly", async () => {
    const result = await startCli([
      "run",
      "-f",
      manifest([dump]),
      "--secret",
      `db=${db}`,
      "--config-map",
      `cfg=${cfg}`,
    ]);
    expect(result.code).toBe(0);
  });

  it("ends before its first task, naming each reference with no source and each key not there (exit 2)", async () => {
    const marker = path.join(dir, "ran");
    const result = await startCli([
      "run",
      "-f",
      manifest([
        { name: "first", run: `touch ${marker}` },
        {
          ...dump,
          env: [...dump.env, { name: "NOPE", valueFrom: { secretKeyRef: { name: "db", key: "nope" } } }],
        },
      ]),
      "--secret",
      `db=${db}`,
    ]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("the run names what it was not given, so nothing was run: ");
    expect(result.stderr).toContain(
      "spec.tasks[1].envFrom[1]: ConfigMap cfg (give it with --config-map cfg=DIR)",
    );
    expect(result.stderr).toContain(`spec.tasks[1].env[4].valueFrom: key nope is not in Secret db (${db})`);
    expect(result.stderr).not.toContain("absent");
    const { existsSync } = await import("node:fs");
    expect(existsSync(marker)).toBe(false);
  });

  it("refuses a flag that is not NAME=DIR, naming it", async () => {
    const result = await startCli(["run", "-f", manifest([dump]), "--secret", "db"]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("--secret db: must be NAME=DIR");
  });
});
