package app

import "path/filepath"

// PinFileName is the pin file's name beside the config file when --executor.pin-file is not
// given.
const PinFileName = "toolmesh.pins.json"

// pinFile is where the executor keeps its pins: --executor.pin-file, or toolmesh.pins.json
// beside the --config file (or else the --mcp-config file), where the operator keeps what
// decides the mesh's trust already; "" without any of them (pins in memory).
func (c *Config) pinFile() string {
	switch {
	case c.Executor.PinFile != "":
		return c.Executor.PinFile
	case c.ConfigFile != "":
		return filepath.Join(filepath.Dir(c.ConfigFile), PinFileName)
	case c.MCPConfig != "":
		return filepath.Join(filepath.Dir(c.MCPConfig), PinFileName)
	}
	return ""
}
