// The package's version, for --version. The bundle has it written in at build time
// (scripts/bundle-cli.ts defines __PLAYBOOK_VERSION__); the tsc build reads package.json.
import { readFileSync } from "node:fs";

declare const __PLAYBOOK_VERSION__: string | undefined;

export function packageVersion(): string {
  if (typeof __PLAYBOOK_VERSION__ === "string") return __PLAYBOOK_VERSION__;
  const text = readFileSync(new URL("../../../package.json", import.meta.url), "utf8");
  return (JSON.parse(text) as { version: string }).version;
}
