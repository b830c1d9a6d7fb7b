// The audit of the bundled packages (scripts/audit-bundle.ts): the bundle inlines its npm
// packages, so `npm audit --omit=dev` has nothing to audit; this script asks the registry's bulk
// advisory endpoint about the packages in the SBOM. The registry is stood in for by an HTTP server
// on loopback that answers as registry.npmjs.org's endpoint does (its real answer cannot be had
// on this machine, whose registry mirror answers 405 to audits).
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import path from "node:path";
import { promisify } from "node:util";
import { afterEach, describe, expect, it } from "vitest";
import {
  auditComponents,
  BULK_ADVISORY_PATH,
  componentsOfSbom,
  verdict,
  versionInRange,
} from "../../scripts/audit-bundle.js";
import { CLI } from "../support/cli.js";

const run = promisify(execFile);
const SBOM = path.join(path.dirname(CLI), "sbom.cdx.json");
const SCRIPT = path.join(import.meta.dirname, "../../dist/scripts/audit-bundle.js");

interface FakeRegistry {
  url: string;
  requests: { method: string; path: string; body: unknown }[];
  close(): Promise<void>;
}

const servers: FakeRegistry[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((server) => server.close()));
});

/** A registry on loopback that answers the bulk advisory endpoint with `status` and `body`. */
async function fakeRegistry(status: number, body: unknown): Promise<FakeRegistry> {
  const requests: FakeRegistry["requests"] = [];
  const server = http.createServer((request, response) => {
    let text = "";
    request.setEncoding("utf8");
    request.on("data", (chunk: string) => {
      text += chunk;
    });
    request.on("end", () => {
      requests.push({
        method: request.method ?? "",
        path: request.url ?? "",
        body: JSON.parse(text || "null"),
      });
      response.writeHead(status, { "Content-Type": "application/json" });
      response.end(typeof body === "string" ? body : JSON.stringify(body));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const registry = {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`,
    requests,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
  servers.push(registry);
  return registry;
}

const components = [
  { name: "zod", version: "4.6.7" },
  { name: "@kubernetes/client-node", version: "2.0.1" },
  { name: "undici", version: "8.13.1" },
];

const advisory = (severity: string, vulnerable: string, title = "Prototype pollution in parse") => ({
  id: 1099,
  title,
  url: "https://github.com/advisories/GHSA-xxxx-yyyy-zzzz",
  severity,
  vulnerable_versions: vulnerable,
});

describe("the decision of the bundle audit", () => {
  it.each([
    { name: "a high advisory on the bundled version fails", severity: "high", range: "<4.7.0", code: 1 },
    { name: "a critical one fails", severity: "critical", range: ">=4.0.0 <4.6.8", code: 1 },
    { name: "a moderate one is shown, not failed", severity: "moderate", range: "<5.0.0", code: 0 },
    { name: "a high one on other versions passes", severity: "high", range: "<4.6.7 || >=5.0.0", code: 0 },
  ])("$name", async ({ severity, range, code }) => {
    const registry = await fakeRegistry(200, { zod: [advisory(severity, range)] });
    const outcome = await auditComponents(components, registry.url, "high");
    const result = verdict(outcome, { level: "high", ifUnreachable: "fail" });
    expect(result.code).toBe(code);
    if (versionInRange("4.6.7", range)) {
      expect(result.lines[0]).toBe(
        `audit-bundle: ${code === 1 ? "FAIL" : "note"} zod@4.6.7: ${severity}: Prototype pollution in parse ` +
          `(https://github.com/advisories/GHSA-xxxx-yyyy-zzzz); vulnerable: ${range}`,
      );
    } else {
      expect(result.lines).toEqual(["audit-bundle: no advisory at high or above in the 3 bundled packages"]);
    }
    // One bulk request naming every bundled package with its version, as npm audit sends it.
    expect(registry.requests).toEqual([
      {
        method: "POST",
        path: BULK_ADVISORY_PATH,
        body: { zod: ["4.6.7"], "@kubernetes/client-node": ["2.0.1"], undici: ["8.13.1"] },
      },
    ]);
  });

  it("says the advisory database could not be reached, with the URL and the status, and fails", async () => {
    const registry = await fakeRegistry(405, '{"error":"Method Not Allowed"}');
    const outcome = await auditComponents(components, registry.url, "high");
    const url = `${registry.url.replace(/\/$/, "")}${BULK_ADVISORY_PATH}`;
    expect(verdict(outcome, { level: "high", ifUnreachable: "fail" })).toEqual({
      code: 2,
      lines: [
        `audit-bundle: the advisory database could not be reached: POST ${url} answered 405 Method Not Allowed: ` +
          `{"error":"Method Not Allowed"}; the 3 bundled packages were NOT audited`,
      ],
    });
    // The mode for a machine whose registry serves no audits: the same line, not failing.
    const warned = verdict(outcome, { level: "high", ifUnreachable: "warn" });
    expect(warned.code).toBe(0);
    expect(warned.lines[0]).toContain(`could not be reached: POST ${url} answered 405`);
    expect(warned.lines[0]).toContain("NOT audited (--if-unreachable warn: not failing)");
  });

  it("says so when nothing listens, or the answer is no advisory list", async () => {
    const gone = await fakeRegistry(200, {});
    await gone.close();
    servers.splice(servers.indexOf(gone), 1);
    const refused = verdict(await auditComponents(components, gone.url, "high"), {
      level: "high",
      ifUnreachable: "fail",
    });
    expect(refused.code).toBe(2);
    expect(refused.lines[0]).toMatch(
      /could not be reached: POST http:\/\/127\.0\.0\.1:\d+\/-\/npm\/v1\/security\/advisories\/bulk failed: ECONNREFUSED/,
    );
    const html = await fakeRegistry(200, "<html>login</html>");
    const notJson = verdict(await auditComponents(components, html.url, "high"), {
      level: "high",
      ifUnreachable: "fail",
    });
    expect(notJson.code).toBe(2);
    expect(notJson.lines[0]).toContain("answered 200 with a body that is not JSON");
  });

  it.each([
    ["4.6.7", "<4.7.0", true],
    ["4.6.7", "<=4.6.7", true],
    ["4.6.7", "<4.6.7", false],
    ["4.6.7", ">=4.0.0 <4.6.7 || >=5.0.0", false],
    ["4.6.7", ">= 4.6.0 < 4.6.8", true],
    ["4.6.7", "*", true],
    ["4.6.7", "4.6.7", true],
    ["4.6.7", "=4.6.6", false],
    ["2.0.0-rc.1", "<2.0.0", true],
    ["4.6.7", "some range no one can read", true],
  ])("reads %s in %s as %s", (version, range, expected) => {
    expect(versionInRange(version, range)).toBe(expected);
  });
});

describe("npm run audit:bundle", () => {
  it("audits every package of the built bundle's SBOM and exits 1 on a critical advisory", async () => {
    const bundled = componentsOfSbom(SBOM);
    expect(bundled.map((c) => c.name)).toContain("@kubernetes/client-node");
    const undici = bundled.find((c) => c.name === "undici");
    const registry = await fakeRegistry(200, {
      undici: [advisory("critical", `<=${undici?.version}`, "Request smuggling")],
    });
    const failed = await run(process.execPath, [SCRIPT, "--registry", registry.url]).then(
      () => ({ code: 0, stdout: "" }),
      (error: { code: number; stdout: string }) => error,
    );
    expect(failed.code).toBe(1);
    expect(failed.stdout).toContain(`FAIL undici@${undici?.version}: critical: Request smuggling`);
    expect(failed.stdout).toContain(
      `1 advisories at high or above in the bundled packages (${bundled.length} audited)`,
    );
    const sent = registry.requests[0]?.body as Record<string, string[]>;
    expect(Object.keys(sent).sort()).toEqual([...new Set(bundled.map((c) => c.name))].sort());
    const sbom = JSON.parse(readFileSync(SBOM, "utf8")) as {
      components: { name: string; version: string }[];
    };
    for (const { name, version } of sbom.components) expect(sent[name]).toContain(version);
  });

  it("refuses a bad flag naming it and its value", async () => {
    const refused = await run(process.execPath, [SCRIPT, "--level", "severe"]).then(
      () => ({ code: 0, stderr: "" }),
      (error: { code: number; stderr: string }) => error,
    );
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain('audit-bundle: --level "severe": Invalid option');
  });
});
