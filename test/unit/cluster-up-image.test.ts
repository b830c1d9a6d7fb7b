// `npm run cluster:up` without the runner image (issue 34 item 2): it builds the image when it is
// missing or older than this checkout's sources, as `npm run image:build` does, or stops before
// starting anything, naming `npm run image:build` and what is missing, instead of a cluster whose
// every run sits in ImagePullBackOff. The script is run against an image tag no one builds
// (PLAYBOOK_IMAGE_TAG), so the machine's own image is never touched.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { REAL_NODE_PREREQUISITES } from "../../test/harness/prerequisites.js";
import { decideRunnerImage } from "../../test/harness/runner-image.js";

const SCRIPT = path.join(import.meta.dirname, "../../dist/scripts/cluster-up.js");

describe("what cluster:up does about the runner image", () => {
  const name = "playbook-controller:0.1.0";
  it.each([
    {
      name: "current: used as it is",
      seen: { name, stale: undefined, build: true },
      want: {
        action: "use",
        why: "the runner image playbook-controller:0.1.0 is current (built from this checkout)",
      },
    },
    {
      name: "missing: built as image:build builds it",
      seen: { name, stale: `${name} is not built yet`, build: true },
      want: {
        action: "build",
        why: "playbook-controller:0.1.0 is not built yet: building it as `npm run image:build` does",
      },
    },
    {
      name: "older than the sources: built again",
      seen: { name, stale: `${name} was built from other sources than this checkout's`, build: true },
      want: {
        action: "build",
        why: expect.stringMatching(/other sources than this checkout's: building it/),
      },
    },
    {
      name: "missing, and --no-image-build: a stop naming npm run image:build",
      seen: { name, stale: `${name} is not built yet`, build: false },
      want: {
        action: "stop",
        why: "playbook-controller:0.1.0 is not built yet, and --no-image-build declines building it: without it the real node's pods cannot start (ImagePullBackOff until their start timeout); run `npm run image:build` first",
      },
    },
    {
      name: "no engine to check or build it: a stop naming npm run image:build and what is missing",
      seen: { name, engineProblem: "No container engine: neither podman nor docker is on PATH", build: true },
      want: {
        action: "stop",
        why: "the runner image playbook-controller:0.1.0 cannot be checked or built here: No container engine: neither podman nor docker is on PATH. without it the real node's pods cannot start (ImagePullBackOff until their start timeout); `npm run image:build` builds it (as root it installs podman first), or set PLAYBOOK_IMAGE_ARCHIVE to an OCI archive of it",
      },
    },
    {
      name: "an archive given: used, nothing asked of an engine",
      seen: { name, archive: "/tmp/image.tar", engineProblem: "none", build: true },
      want: { action: "use", why: "the runner image from PLAYBOOK_IMAGE_ARCHIVE (/tmp/image.tar)" },
    },
  ])("$name", ({ seen, want }) => {
    expect(decideRunnerImage(seen)).toEqual(want);
  });
});

const isRoot = process.getuid?.() === 0;
const nodeReady = REAL_NODE_PREREQUISITES.every((p) => p.optional || p.present());
const podman = spawnSync("sh", ["-c", "command -v podman"]).status === 0;

let dir: string | undefined;
afterEach(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** cluster:up as a reader runs it, with an image tag no one builds; nothing is installed. */
function clusterUp(args: string[], env: Record<string, string>) {
  dir = mkdtempSync(path.join(tmpdir(), "playbook-image-"));
  const stateDir = path.join(dir, "cluster");
  const result = spawnSync(process.execPath, [SCRIPT, "--no-install", ...args], {
    encoding: "utf8",
    env: {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      CLUSTER_STATE_DIR: stateDir,
      PLAYBOOK_IMAGE_TAG: `absent-${process.pid}`,
      ...env,
    },
    timeout: 90_000,
  });
  return { ...result, stateDir };
}

// Where the real node could start (root, containerd...): only the image is wanting.
describe.runIf(isRoot && nodeReady && podman)("cluster:up whose runner image is not built", () => {
  it("stops before starting anything with --no-image-build, naming the image and `npm run image:build`", () => {
    const result = clusterUp(["--no-image-build"], {});
    expect(result.status, result.stderr).toBe(1);
    expect(result.stdout).toBe("");
    expect(result.stderr.split("\n").filter(Boolean)).toEqual([
      `cluster:up: playbook-controller:absent-${process.pid} is not built yet, and --no-image-build declines building it: without it the real node's pods cannot start (ImagePullBackOff until their start timeout); run \`npm run image:build\` first`,
    ]);
    // Nothing was started: no state, no logs, no binaries built.
    expect(existsSync(result.stateDir) ? readdirSync(result.stateDir) : []).toEqual([]);
  });

  it("stops before starting anything when no engine can build it, naming what is missing and `npm run image:build`", () => {
    // A docker client with no daemon, as on a fresh machine of this kind: no engine.
    const result = clusterUp([], {
      PLAYBOOK_CONTAINER_ENGINE: "docker",
      PLAYBOOK_ENGINE_PROBE_TIMEOUT_MS: "5000",
    });
    expect(result.status, result.stderr).toBe(1);
    expect(result.stdout).toBe("");
    const lines = result.stderr.split("\n").filter(Boolean);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(
      new RegExp(
        `^cluster:up: the runner image playbook-controller:absent-${process.pid} cannot be checked or built here: No (working )?container engine: docker .*; \`npm run image:build\` builds it \\(as root it installs podman first\\), or set PLAYBOOK_IMAGE_ARCHIVE to an OCI archive of it$`,
      ),
    );
    expect(existsSync(result.stateDir) ? readdirSync(result.stateDir) : []).toEqual([]);
  });
});
