// Package converter is the unit-conversion MCP server toolmesh ships:
// temperatures between Celsius, Fahrenheit and Kelvin.
package converter

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/toolmesh/toolmesh/mcpservers/internal/toolargs"
)

// Name is the MCP server name.
const Name = "converter"

// Version is the server version reported in the MCP handshake.
const Version = "0.1.0"

// Unit is a temperature unit.
type Unit string

// The temperature units, as they appear in the tool schemas.
const (
	Celsius    Unit = "C"
	Fahrenheit Unit = "F"
	Kelvin     Unit = "K"
)

// ParseUnit accepts C, F, K in any case, the names celsius, fahrenheit and
// kelvin, and a leading degree sign (°C).
func ParseUnit(s string) (Unit, error) {
	u := strings.ToLower(strings.TrimSpace(s))
	u = strings.TrimPrefix(u, "°")
	u = strings.TrimPrefix(u, "degrees ")
	switch u {
	case "c", "celsius", "centigrade":
		return Celsius, nil
	case "f", "fahrenheit":
		return Fahrenheit, nil
	case "k", "kelvin", "kelvins":
		return Kelvin, nil
	}
	return "", fmt.Errorf("unknown temperature unit %q: use C (Celsius), F (Fahrenheit) or K (Kelvin)", s)
}

// symbol is how the unit is written after a number: °C, °F, K.
func (u Unit) symbol() string {
	if u == Kelvin {
		return "K"
	}
	return "°" + string(u)
}

// absoluteZero is 0 K in each unit.
var absoluteZero = map[Unit]float64{Celsius: -273.15, Fahrenheit: -459.67, Kelvin: 0}

// Convert converts a temperature. Temperatures below absolute zero are an
// error.
func Convert(v float64, from, to Unit) (float64, error) {
	var k float64
	switch from {
	case Celsius:
		k = v + 273.15
	case Fahrenheit:
		k = (v-32)*5/9 + 273.15
	case Kelvin:
		k = v
	default:
		return 0, fmt.Errorf("unknown temperature unit %q", from)
	}
	if math.IsNaN(k) || math.IsInf(k, 0) {
		return 0, fmt.Errorf("temperature %v %s is out of range", v, from)
	}
	// Allow for rounding error at exactly absolute zero (-459.67 F).
	if k < -1e-9 {
		return 0, fmt.Errorf("%s %s is below absolute zero (%s %s = 0 K)", format(v), from.symbol(), format(absoluteZero[from]), from.symbol())
	}
	if k < 0 {
		k = 0
	}
	var out float64
	switch to {
	case Celsius:
		out = k - 273.15
	case Fahrenheit:
		out = (k-273.15)*9/5 + 32
	case Kelvin:
		out = k
	default:
		return 0, fmt.Errorf("unknown temperature unit %q", to)
	}
	if from == to {
		out = v
	}
	if math.IsInf(out, 0) {
		return 0, fmt.Errorf("temperature %v %s is out of range", v, from)
	}
	return round(out), nil
}

// round drops floating point noise such as 211.99999999999997 by keeping 12
// significant digits, far more than any thermometer has.
func round(v float64) float64 {
	r, err := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 12, 64), 64)
	if err != nil || r == 0 {
		return 0 // also turns -0 into 0
	}
	return r
}

func format(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e21 {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// Result is the structured content of every converter tool.
type Result struct {
	Value float64 `json:"value" jsonschema:"the converted temperature"`
	Unit  Unit    `json:"unit" jsonschema:"the unit of value: C, F or K"`
}

// New returns the converter MCP server.
func New() *server.MCPServer {
	s := server.NewMCPServer(Name, Version,
		server.WithToolCapabilities(false),
		server.WithRecovery(),
		server.WithInstructions("Temperature conversions between Celsius (C), Fahrenheit (F) and Kelvin (K). Temperatures below absolute zero (0 K = -273.15 °C = -459.67 °F) are rejected."),
	)
	annotations := []mcp.ToolOption{
		mcp.WithReadOnlyHintAnnotation(true),
		mcp.WithIdempotentHintAnnotation(true),
		mcp.WithOpenWorldHintAnnotation(false),
		mcp.WithDestructiveHintAnnotation(false),
		mcp.WithOutputSchema[Result](),
	}
	fixed := func(name, title, desc, arg string, from, to Unit) server.ServerTool {
		opts := append([]mcp.ToolOption{
			mcp.WithDescription(desc),
			mcp.WithTitleAnnotation(title),
			mcp.WithNumber(arg, mcp.Required(), mcp.Description(fmt.Sprintf("Temperature in degrees %s, for example 100.", arg))),
		}, annotations...)
		return server.ServerTool{
			Tool: mcp.NewTool(name, opts...),
			Handler: func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				v, err := toolargs.Number(req, arg)
				if err != nil {
					return mcp.NewToolResultError(err.Error()), nil
				}
				return result(v, from, to)
			},
		}
	}
	unitNames := []string{string(Celsius), string(Fahrenheit), string(Kelvin)}
	s.AddTools(
		fixed("celsius_to_fahrenheit", "Celsius to Fahrenheit",
			"Convert a temperature from degrees Celsius to degrees Fahrenheit (F = C × 9/5 + 32). Example: 100 gives 212. "+
				"Returns an error below absolute zero (-273.15 °C).",
			"celsius", Celsius, Fahrenheit),
		fixed("fahrenheit_to_celsius", "Fahrenheit to Celsius",
			"Convert a temperature from degrees Fahrenheit to degrees Celsius (C = (F - 32) × 5/9). Example: 212 gives 100. "+
				"Returns an error below absolute zero (-459.67 °F).",
			"fahrenheit", Fahrenheit, Celsius),
		server.ServerTool{
			Tool: mcp.NewTool("convert_temperature", append([]mcp.ToolOption{
				mcp.WithDescription("Convert a temperature between Celsius (C), Fahrenheit (F) and Kelvin (K). " +
					"Example: value=0, from_unit=C, to_unit=K gives 273.15. Kelvin is absolute: 0 K = -273.15 °C = -459.67 °F; " +
					"temperatures below absolute zero return an error. Results are rounded to 12 significant digits."),
				mcp.WithTitleAnnotation("Convert temperature"),
				mcp.WithNumber("value", mcp.Required(), mcp.Description("The temperature to convert, in from_unit.")),
				mcp.WithString("from_unit", mcp.Required(), mcp.Enum(unitNames...),
					mcp.Description("Unit of value: C (Celsius), F (Fahrenheit) or K (Kelvin).")),
				mcp.WithString("to_unit", mcp.Required(), mcp.Enum(unitNames...),
					mcp.Description("Unit to convert to: C (Celsius), F (Fahrenheit) or K (Kelvin).")),
			}, annotations...)...),
			Handler: func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				v, err := toolargs.Number(req, "value")
				if err != nil {
					return mcp.NewToolResultError(err.Error()), nil
				}
				var units [2]Unit
				for i, key := range []string{"from_unit", "to_unit"} {
					s, err := req.RequireString(key)
					if err != nil {
						return mcp.NewToolResultError(fmt.Sprintf("missing required argument %q: C, F or K", key)), nil
					}
					if units[i], err = ParseUnit(s); err != nil {
						return mcp.NewToolResultError(fmt.Sprintf("argument %q: %v", key, err)), nil
					}
				}
				return result(v, units[0], units[1])
			},
		},
	)
	return s
}

func result(v float64, from, to Unit) (*mcp.CallToolResult, error) {
	out, err := Convert(v, from, to)
	if err != nil {
		return mcp.NewToolResultError(err.Error()), nil
	}
	return mcp.NewToolResultStructured(Result{Value: out, Unit: to}, format(out)), nil
}
