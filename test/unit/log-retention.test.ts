// The test cluster's logs are kept when anything failed, and only then: a suite that fails must
// leave the logs that say why (they used to be deleted with the state folder in every case).
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import {
  KEEP_AT_MOST,
  keepOrRemoveClusterState,
  keptName,
  suiteOutcome,
  whyKeepLogs,
} from "../harness/log-retention.js";

describe("whether the cluster's logs are kept", () => {
  it("deletes them only when every test file passed and nothing else failed", () => {
    expect(whyKeepLogs({ failedFiles: 0, unhandledErrors: 0 })).toBeUndefined();
    expect(whyKeepLogs({ failedFiles: 1, unhandledErrors: 0 })).toBe("1 test file failed");
    expect(whyKeepLogs({ failedFiles: 3, unhandledErrors: 2 })).toBe(
      "3 test files failed, 2 unhandled errors",
    );
    expect(whyKeepLogs({ failedFiles: 0, unhandledErrors: 1 })).toBe("1 unhandled error");
    expect(whyKeepLogs({ setupFailed: true, failedFiles: 0, unhandledErrors: 0 })).toBe(
      "the cluster's setup failed",
    );
    expect(whyKeepLogs({ interrupted: true, failedFiles: 0, unhandledErrors: 0 })).toBe(
      "the run was interrupted",
    );
  });

  it("reads a file's outcome from the suite afterAll gets: a failed test anywhere in it, or a hook's error", () => {
    const passed = { result: { state: "pass" } };
    expect(suiteOutcome({ tasks: [passed, { tasks: [passed] }] })).toEqual({
      failedFiles: 0,
      unhandledErrors: 0,
    });
    expect(suiteOutcome({ tasks: [passed, { tasks: [{ result: { state: "fail" } }] }] }).failedFiles).toBe(1);
    expect(suiteOutcome({ result: { errors: [new Error("beforeAll")] }, tasks: [] }).failedFiles).toBe(1);
  });

  it("names kept folders so that they sort by time and no sweep of test-<pid> folders takes them", () => {
    expect(keptName(4242, new Date("2026-11-30T23:50:01.123Z"))).toBe("kept-2026-11-30T23-50-01Z-4242");
    expect(/^test-(\d+)(-real)?$/.test(keptName(4242))).toBe(false);
  });
});

describe("keeping or removing the state folder", () => {
  let parent: string | undefined;
  afterEach(() => {
    if (parent) rmSync(parent, { recursive: true, force: true });
  });

  function stateFolder(name = `test-${process.pid}`): string {
    parent ??= mkdtempSync(path.join(tmpdir(), "playbook-logs-"));
    const dir = path.join(parent, name);
    mkdirSync(path.join(dir, "logs"), { recursive: true });
    writeFileSync(path.join(dir, "logs", "kube-apiserver.log"), "E1130 the reason\n");
    return dir;
  }

  it("removes it after a full success, and says nothing", async () => {
    const dir = stateFolder();
    const said: string[] = [];
    expect(await keepOrRemoveClusterState(dir, undefined, (m) => said.push(m))).toBeUndefined();
    expect(existsSync(dir)).toBe(false);
    expect(said).toEqual([]);
  });

  it("keeps it with its logs after a failure and prints where they are", async () => {
    const dir = stateFolder(`test-${process.pid}-real`);
    const said: string[] = [];
    const kept = await keepOrRemoveClusterState(dir, "1 test file failed", (m) => said.push(m));
    expect(kept).toMatch(new RegExp(`/kept-[0-9TZ-]+-${process.pid}-real$`));
    expect(existsSync(dir)).toBe(false);
    expect(readFileSync(path.join(kept as string, "logs", "kube-apiserver.log"), "utf8")).toBe(
      "E1130 the reason\n",
    );
    expect(said).toEqual([
      `Kept the cluster's logs (1 test file failed): ${path.join(kept as string, "logs")}`,
    ]);
  });

  it(`keeps only the last ${KEEP_AT_MOST} kept folders`, async () => {
    const dir = stateFolder();
    const folder = parent as string;
    expect(KEEP_AT_MOST).toBe(5);
    for (let i = 0; i < 7; i++) mkdirSync(path.join(folder, `kept-2020-01-0${i + 1}T00-00-00Z-1`));
    await keepOrRemoveClusterState(dir, "the run was interrupted", () => {});
    const kept = readdirSync(folder).sort();
    expect(kept).toHaveLength(KEEP_AT_MOST);
    // The 7 older ones and the new one: the 3 oldest went.
    expect(kept.slice(0, -1)).toEqual([4, 5, 6, 7].map((day) => `kept-2020-01-0${day}T00-00-00Z-1`));
    expect(kept.at(-1)).toMatch(new RegExp(`-${process.pid}$`));
  });
});
