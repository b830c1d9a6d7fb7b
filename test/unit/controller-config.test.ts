import { describe, expect, it } from "vitest";
import { InvalidConfigError, loadControllerConfig } from "../../src/controller/config.js";

describe("the controller's configuration", () => {
  it("has defaults that work against a cluster", () => {
    const config = loadControllerConfig({}, {});
    expect(config).toMatchObject({
      defaultCeiling: 3_600_000,
      maxCeiling: 86_400_000,
      defaultStall: 600_000,
      defaultKillGrace: 10_000,
      ttlSecondsAfterFinished: 3600,
      workers: 2,
      metricsAddress: ":8080",
      leaderElection: true,
      namespaces: [],
    });
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
  ])("refuses $name, naming the flag", ({ flags, says }) => {
    expect(() => loadControllerConfig(flags, {})).toThrow(InvalidConfigError);
    expect(() => loadControllerConfig(flags, {})).toThrow(says);
  });
});
