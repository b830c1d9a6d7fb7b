// Output through a long kill grace on the real node (grace-output.suite.ts), with the agent delivered by post-start.
// One file per layout, so the two run side by side on the shared real node.
import { agentLayout } from "../harness/task-images.js";
import { graceOutputSuite } from "./grace-output.suite.js";

graceOutputSuite(agentLayout("post-start"));
