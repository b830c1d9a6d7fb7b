// A runner OOMKilled after its progress said a task Succeeded (runner-oom.suite.ts), with the agent delivered by post-start.
// One file per layout, so the two run side by side on the shared real node.
import { agentLayout } from "../harness/task-images.js";
import { runnerOomSuite } from "./runner-oom.suite.js";

runnerOomSuite(agentLayout("post-start"));
