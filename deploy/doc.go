// Package deploy holds the files compose.yaml mounts and reads: the toolmesh configuration
// (toolmesh.yaml, keys are flag names), the MCP servers (mcp.json), the model download
// (model/), the CPU-only override (compose.cpu.yaml) and the image's health-check program
// (healthcheck/). It has no code of its own: its tests load compose.yaml with the Compose
// specification's own loader and check it against these files and against toolmesh's flags,
// and run the same topology without containers (toolmesh processes on loopback, with test
// doubles of Qdrant and llama-server).
package deploy
