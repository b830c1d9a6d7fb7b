// `playbook run` and tasks that name an image, where no container engine answers: the run is
// refused before anything runs (exit 2) naming the task, its image and what to install, unless
// --on-host runs such tasks here, which the progress, the status and the report then say. The
// podman path itself is test/image/local-images.test.ts.
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { startCli as cli } from "../support/cli.js";

function scratch(): string {
  return mkdtempSync(join(tmpdir(), "local-images-"));
}

function manifest(dir: string, spec: object): string {
  const path = join(dir, "playbook.yaml");
  writeFileSync(
    path,
    stringify({ apiVersion: "playbook.dev/v1alpha1", kind: "Playbook", metadata: { name: "backup" }, spec }),
  );
  return path;
}

/** A PATH holding only a docker client whose daemon is not there, as on this machine. */
function pathWithSilentDocker(dir: string): string {
  const bin = join(dir, "bin");
  const docker = join(bin, "docker");
  mkdirSync(bin);
  writeFileSync(
    docker,
    "#!/bin/sh\necho 'Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?' >&2\nexit 1\n",
  );
  chmodSync(docker, 0o755);
  return bin;
}

describe("playbook run: tasks in an image without podman or docker", () => {
  it("refuses with exit 2 before anything runs, naming the task, its image and what to install", async () => {
    const dir = scratch();
    const witness = join(dir, "ran");
    const file = manifest(dir, {
      tasks: [
        { name: "prepare", run: `touch ${witness}` },
        { name: "dump", image: "postgres:16", run: "pg_dump > /workspace/db.sql" },
      ],
    });
    // An empty folder as PATH: neither podman nor docker.
    const result = await cli(["run", "-f", file], { env: { PATH: dir } });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("task dump (spec.tasks[1]) runs in image postgres:16");
    expect(result.stderr).toContain("neither podman nor docker is on PATH");
    expect(result.stderr).toContain("install podman");
    expect(result.stderr).toContain("--on-host");
    expect(existsSync(witness)).toBe(false);
  });

  it("counts a docker client without a daemon as no engine, and says what it answered", async () => {
    const dir = scratch();
    const file = manifest(dir, {
      image: "registry.example/tools:3",
      tasks: [{ name: "upload", run: "true" }],
    });
    const result = await cli(["run", "-f", file], { env: { PATH: pathWithSilentDocker(dir) } });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("task upload (spec.tasks[0]) runs in image registry.example/tools:3");
    expect(result.stderr).toContain("podman is not on PATH");
    expect(result.stderr).toContain(
      "docker is on PATH but does not answer (`docker info` failed: Cannot connect to the Docker daemon",
    );
    expect(result.stderr).toContain("start the Docker daemon");
  });

  it("--on-host runs them here, and the progress, the status and the report say so", async () => {
    const dir = scratch();
    const witness = join(dir, "ran");
    const report = join(dir, "report.json");
    const file = manifest(dir, {
      tasks: [
        { name: "dump", image: "postgres:16", run: `echo dumped > ${witness}` },
        { name: "check", run: `cat ${witness}` },
      ],
    });
    const result = await cli(["run", "-f", file, "--on-host", "-o", "json", "--report", report], {
      env: { PATH: `${dir}:/usr/bin:/bin` },
    });
    expect(result.stderr).toContain("playbook: --on-host: dump runs on this machine, not in its image");
    expect(result.stderr).toContain(
      "playbook: task dump started on the host, not in postgres:16 (--on-host)",
    );
    expect(result.code).toBe(0);
    expect(readFileSync(witness, "utf8")).toBe("dumped\n");
    const status = (JSON.parse(result.stdout) as { status: { tasks: { name: string; message?: string }[] } })
      .status;
    expect(status.tasks[0]?.message).toBe("ran on the host, not in its image (playbook run --on-host)");
    expect(status.tasks[1]?.message).toBeUndefined();
    const written = JSON.parse(readFileSync(report, "utf8")) as { tasks: { h?: number }[] };
    expect(written.tasks.map((task) => task.h)).toEqual([1, undefined]);
  });
});
