import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

describe("toolchain", () => {
  it("runs the tests on the Node.js major the project pins (24), whatever the machine's node is", () => {
    const pkg = JSON.parse(readFileSync(join(import.meta.dirname, "../../package.json"), "utf8"));
    const pinned = String(pkg.devDependencies.node).split(".")[0];
    expect(pinned).toBe("24");
    expect(process.versions.node.split(".")[0]).toBe(pinned);
    expect(readFileSync(join(import.meta.dirname, "../../.nvmrc"), "utf8").trim()).toBe(pinned);
  });
});
