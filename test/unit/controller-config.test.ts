import { spawnSync } from "node:child_process";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { InvalidConfigError, loadControllerConfig } from "../../src/controller/config.js";

const CLI = path.join(import.meta.dirname, "../../dist/src/cli/main.js");

describe("the controller's configuration", () => {
  it("has defaults that work against a cluster", () => {
    const config = loadControllerConfig({}, {});
    expect(config).toMatchObject({
      defaultCeiling: 3_600_000,
      maxCeiling: 86_400_000,
      defaultStall: 600_000,
      defaultKillGrace: 10_000,
      maxKillGrace: 300_000,
      ttlSecondsAfterFinished: 3600,
      workers: 2,
      metricsAddress: ":8080",
      leaderElection: true,
      namespaces: [],
      logFormat: "json",
      metricsPlaybookLabel: "",
      metricsTaskLabel: false,
    });
  });

  it("bounds killGrace at 5m by default, takes --max-kill-grace, and refuses a default above it", () => {
    expect(loadControllerConfig({ maxKillGrace: "1m" }, {}).maxKillGrace).toBe(60_000);
    expect(loadControllerConfig({}, { PLAYBOOK_MAX_KILL_GRACE: "30s" }).maxKillGrace).toBe(30_000);
    expect(() => loadControllerConfig({ defaultKillGrace: "10m" }, {})).toThrow(
      "--default-kill-grace ($PLAYBOOK_DEFAULT_KILL_GRACE): 10m is longer than the maximum killGrace 5m (--max-kill-grace)",
    );
  });

  it("gives a pod 5m to start by default, and takes --default-start-timeout from a flag or env", () => {
    expect(loadControllerConfig({}, {}).defaultStartTimeout).toBe(300_000);
    expect(loadControllerConfig({ defaultStartTimeout: "90s" }, {}).defaultStartTimeout).toBe(90_000);
    expect(loadControllerConfig({}, { PLAYBOOK_DEFAULT_START_TIMEOUT: "2m" }).defaultStartTimeout).toBe(
      120_000,
    );
    expect(() => loadControllerConfig({ defaultStartTimeout: "0s" }, {})).toThrow(
      "--default-start-timeout ($PLAYBOOK_DEFAULT_START_TIMEOUT): must be longer than 0s",
    );
  });

  it("reads live progress every 10s by default, takes --progress-interval, and 0s turns it off", () => {
    expect(loadControllerConfig({}, {}).progressInterval).toBe(10_000);
    expect(loadControllerConfig({ progressInterval: "30s" }, {}).progressInterval).toBe(30_000);
    expect(loadControllerConfig({}, { PLAYBOOK_PROGRESS_INTERVAL: "0s" }).progressInterval).toBe(0);
    expect(() => loadControllerConfig({ progressInterval: "500ms" }, {})).toThrow(
      "--progress-interval ($PLAYBOOK_PROGRESS_INTERVAL): 500ms is shorter than 1s: give 1s or more, or 0s to turn live progress off",
    );
    expect(() => loadControllerConfig({ progressInterval: "often" }, {})).toThrow(
      /--progress-interval \(\$PLAYBOOK_PROGRESS_INTERVAL\): .*often/,
    );
  });

  it("takes a Playbook label for the metrics and a log format from env or flags", () => {
    expect(
      loadControllerConfig(
        {},
        { PLAYBOOK_METRICS_PLAYBOOK_LABEL: "app.kubernetes.io/name", PLAYBOOK_LOG_FORMAT: "text" },
      ),
    ).toMatchObject({ metricsPlaybookLabel: "app.kubernetes.io/name", logFormat: "text" });
    expect(loadControllerConfig({ metricsPlaybookLabel: "team" }, {}).metricsPlaybookLabel).toBe("team");
  });

  it("takes the task label switch from env or flags, off by default, and refuses a value that is no boolean", () => {
    expect(loadControllerConfig({}, {}).metricsTaskLabel).toBe(false);
    expect(loadControllerConfig({}, { PLAYBOOK_METRICS_TASK_LABEL: "true" }).metricsTaskLabel).toBe(true);
    // Commander gives a bare --metrics-task-label as true.
    expect(loadControllerConfig({ metricsTaskLabel: true }, {}).metricsTaskLabel).toBe(true);
    expect(() => loadControllerConfig({ metricsTaskLabel: "yes" }, {})).toThrow(
      /metrics-task-label|metricsTaskLabel/,
    );
  });

  it("takes the store's endpoint for the run's pods from env or flags, unset by default, and refuses one that is no http(s) URL", () => {
    expect(loadControllerConfig({}, {}).logArchivePodEndpoint).toBeUndefined();
    expect(
      loadControllerConfig({}, { PLAYBOOK_LOG_ARCHIVE_POD_ENDPOINT: "http://10.87.0.1:8333" })
        .logArchivePodEndpoint,
    ).toBe("http://10.87.0.1:8333");
    expect(
      loadControllerConfig({ logArchivePodEndpoint: "https://s3.example:443" }, {}).logArchivePodEndpoint,
    ).toBe("https://s3.example:443");
    expect(() => loadControllerConfig({ logArchivePodEndpoint: "10.87.0.1:8333" }, {})).toThrow(
      "--log-archive-pod-endpoint ($PLAYBOOK_LOG_ARCHIVE_POD_ENDPOINT): must be an http:// or https:// URL",
    );
  });

  it("has the runner upload the log unless told to follow it, and refuses any other way naming the flag", () => {
    expect(loadControllerConfig({}, {}).logArchiveUpload).toBe("runner");
    expect(loadControllerConfig({}, { PLAYBOOK_LOG_ARCHIVE_UPLOAD: "follow" }).logArchiveUpload).toBe(
      "follow",
    );
    expect(() => loadControllerConfig({ logArchiveUpload: "controller" }, {})).toThrow(
      /--log-archive-upload \(\$PLAYBOOK_LOG_ARCHIVE_UPLOAD\): .*"runner".*"follow"/,
    );
  });

  it("takes env, and flags over env", () => {
    const config = loadControllerConfig(
      { workers: "4" },
      {
        PLAYBOOK_WORKERS: "3",
        PLAYBOOK_DEFAULT_CEILING: "30m",
        PLAYBOOK_NAMESPACES: "a, b",
        PLAYBOOK_LEADER_ELECTION: "false",
      },
    );
    expect(config.workers).toBe(4);
    expect(config.defaultCeiling).toBe(1_800_000);
    expect(config.namespaces).toEqual(["a", "b"]);
    expect(config.leaderElection).toBe(false);
  });

  it.each([
    { name: "a malformed duration", flags: { defaultStall: "ten minutes" }, says: "--default-stall" },
    {
      name: "a default ceiling above the maximum",
      flags: { defaultCeiling: "48h" },
      says: "maximum ceiling",
    },
    { name: "zero workers", flags: { workers: "0" }, says: "--workers" },
    { name: "a bad address", flags: { metricsAddress: "8080" }, says: "--metrics-address" },
    { name: "an unknown log format", flags: { logFormat: "xml" }, says: "--log-format" },
    ...["app name", "-team", "Example.com/name", "a/b/c", `x/${"n".repeat(64)}`].map((key) => ({
      name: `the label key ${JSON.stringify(key)}`,
      flags: { metricsPlaybookLabel: key },
      says: `--metrics-playbook-label ($PLAYBOOK_METRICS_PLAYBOOK_LABEL): ${JSON.stringify(key)} is not a label key`,
    })),
  ])("refuses $name, naming the flag", ({ flags, says }) => {
    expect(() => loadControllerConfig(flags, {})).toThrow(InvalidConfigError);
    expect(() => loadControllerConfig(flags, {})).toThrow(says);
  });
});

describe("playbook controller with a bad setting", () => {
  it("exits 2 before connecting anywhere, naming the flag and the value", () => {
    const result = spawnSync(process.execPath, [CLI, "controller", "--metrics-playbook-label", "app name"], {
      encoding: "utf8",
      env: { PATH: process.env.PATH, KUBECONFIG: "/nonexistent" },
      timeout: 30_000,
    });
    expect(result.status).toBe(2);
    expect(result.stderr).toContain(
      '--metrics-playbook-label ($PLAYBOOK_METRICS_PLAYBOOK_LABEL): "app name" is not a label key',
    );
  });
});
