// Global setup of every test project: what `npm test` needs from this machine is checked (and, as
// root with apt-get, installed) before any test runs, so a missing tool fails once with the command
// that installs it instead of failing tests one by one. PLAYBOOK_NO_INSTALL=1 declines installing.
import { ensurePrerequisites, installForbiddenByEnv, TEST_PREREQUISITES } from "./prerequisites.js";

export default function setup(): void {
  ensurePrerequisites({
    install: !installForbiddenByEnv(),
    log: (message) => process.stderr.write(`[prerequisites] ${message}\n`),
    prerequisites: TEST_PREREQUISITES,
    why: "npm test checks the dashboard and the alerts with Prometheus and promtool",
  });
}
