import { describe, expect, it } from "vitest";
import { handedCeilingLeftMs, podAgeMs } from "../../src/pod-runner/pod-age.js";

/** A /proc where PID 1 is the pod's pause process, started `pauseStartSeconds` after boot. */
const proc =
  (comm: string, uptimeSeconds: number, pauseStartSeconds: number) =>
  (path: string): string => {
    if (path === "/proc/1/comm") return `${comm}\n`;
    if (path === "/proc/uptime") return `${uptimeSeconds.toFixed(2)} 1234.00\n`;
    if (path === "/proc/1/stat") {
      const after = ["S", ...Array.from({ length: 18 }, () => "0"), String(pauseStartSeconds * 100), "0"];
      return `1 (pause) ${after.join(" ")}\n`;
    }
    throw new Error(`ENOENT ${path}`);
  };

describe("the runner's remaining ceiling in a pod", () => {
  it("is the duration handed at the pod's create, less the pod's age by the node's boot clock", () => {
    // The pause process started 90 s ago: 600 s were left at the create, 510 s are left now.
    const age = podAgeMs(proc("pause", 5000, 4910));
    expect(age).toBe(90_000);
    expect(handedCeilingLeftMs({ PLAYBOOK_CEILING_LEFT_MS: "600000" }, age)).toBe(510_000);
  });

  it("takes this process's own age where PID 1 is not a pause process (not in a pod's shared namespace)", () => {
    const age = podAgeMs(proc("systemd", 5000, 10));
    expect(age).toBeLessThan(60_000);
  });

  it("is never below zero, and undefined for a pod handed no duration (an earlier controller's)", () => {
    expect(handedCeilingLeftMs({ PLAYBOOK_CEILING_LEFT_MS: "1000" }, 5000)).toBe(0);
    expect(handedCeilingLeftMs({}, 5000)).toBeUndefined();
  });

  it("refuses a value that is not whole milliseconds, naming the variable and the value", () => {
    expect(() => handedCeilingLeftMs({ PLAYBOOK_CEILING_LEFT_MS: "10m" }, 0)).toThrow(
      '$PLAYBOOK_CEILING_LEFT_MS must be a whole number of milliseconds, not "10m"',
    );
  });
});
