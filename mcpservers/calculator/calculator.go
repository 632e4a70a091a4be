// Package calculator is the arithmetic MCP server toolmesh ships: add,
// subtract, multiply, divide and calculate (a safe expression evaluator).
package calculator

import (
	"context"
	"fmt"
	"math"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/toolmesh/toolmesh/mcpservers/internal/toolargs"
)

// Name is the MCP server name.
const Name = "calculator"

// Version is the server version reported in the MCP handshake.
const Version = "0.1.0"

// Result is the structured content of every calculator tool.
type Result struct {
	Result float64 `json:"result" jsonschema:"the numeric result"`
}

// New returns the calculator MCP server.
func New() *server.MCPServer {
	s := server.NewMCPServer(Name, Version,
		server.WithToolCapabilities(false),
		server.WithRecovery(),
		server.WithInstructions("Exact arithmetic on 64-bit floating point numbers. Use add/subtract/multiply/divide for one operation, calculate for a whole expression."),
	)
	binary := func(name, title, desc string, op func(a, b float64) (float64, error)) server.ServerTool {
		tool := mcp.NewTool(name,
			mcp.WithDescription(desc),
			mcp.WithTitleAnnotation(title),
			mcp.WithReadOnlyHintAnnotation(true),
			mcp.WithIdempotentHintAnnotation(true),
			mcp.WithOpenWorldHintAnnotation(false),
			mcp.WithDestructiveHintAnnotation(false),
			mcp.WithNumber("a", mcp.Required(), mcp.Description("First operand, a number such as 2 or -3.5.")),
			mcp.WithNumber("b", mcp.Required(), mcp.Description("Second operand, a number such as 2 or -3.5.")),
			mcp.WithOutputSchema[Result](),
		)
		return server.ServerTool{Tool: tool, Handler: func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			a, err := toolargs.Number(req, "a")
			if err != nil {
				return mcp.NewToolResultError(err.Error()), nil
			}
			b, err := toolargs.Number(req, "b")
			if err != nil {
				return mcp.NewToolResultError(err.Error()), nil
			}
			v, err := op(a, b)
			if err != nil {
				return mcp.NewToolResultError(err.Error()), nil
			}
			return result(v)
		}}
	}
	s.AddTools(
		binary("add", "Add", "Add two numbers: returns their sum a + b (a plus b). Example: 2 plus 3, a=2, b=3, gives 5.",
			func(a, b float64) (float64, error) { return a + b, nil }),
		binary("subtract", "Subtract", "Subtract b from a: returns the difference a - b (a minus b). Example: 10 minus 4, a=10, b=4, gives 6.",
			func(a, b float64) (float64, error) { return a - b, nil }),
		binary("multiply", "Multiply", "Multiply two numbers: returns their product a * b (a times b). Example: 6 times 7, a=6, b=7, gives 42.",
			func(a, b float64) (float64, error) { return a * b, nil }),
		binary("divide", "Divide", "Divide a by b: returns the quotient a / b (a divided by b) as a decimal (7 / 2 gives 3.5, not an integer quotient). Returns an error if b is 0.",
			func(a, b float64) (float64, error) {
				if b == 0 {
					return 0, fmt.Errorf("cannot divide %s by zero", Format(a))
				}
				return a / b, nil
			}),
		server.ServerTool{
			Tool: mcp.NewTool("calculate",
				mcp.WithDescription("Evaluate an arithmetic expression and return its value, e.g. \"(2 + 3) * 4\" gives 20. "+
					"Allowed: numbers (12, 3.5, .5, 1e6), + - * /, % (modulo, result has the sign of the divisor), ** (power), unary minus and parentheses. "+
					"** is right-associative and binds tighter than unary minus, as in Python: -2**2 is -4, 2**3**2 is 512. "+
					"No variables, functions (sqrt, sin, ...), constants (pi) or units. "+
					"Errors (division by zero, overflow, syntax errors with their position) are returned as tool errors. "+
					fmt.Sprintf("At most %d characters.", MaxExpressionLength)),
				mcp.WithTitleAnnotation("Calculate expression"),
				mcp.WithReadOnlyHintAnnotation(true),
				mcp.WithIdempotentHintAnnotation(true),
				mcp.WithOpenWorldHintAnnotation(false),
				mcp.WithDestructiveHintAnnotation(false),
				mcp.WithString("expression", mcp.Required(), mcp.MaxLength(MaxExpressionLength),
					mcp.Description("The arithmetic expression, for example \"2 * (3 + 4) ** 2 / 7\".")),
				mcp.WithOutputSchema[Result](),
			),
			Handler: func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				expr, err := req.RequireString("expression")
				if err != nil {
					return mcp.NewToolResultError(err.Error()), nil
				}
				v, err := Evaluate(expr)
				if err != nil {
					return mcp.NewToolResultError("cannot evaluate expression: " + err.Error()), nil
				}
				return result(v)
			},
		},
	)
	return s
}

func result(v float64) (*mcp.CallToolResult, error) {
	if math.IsNaN(v) {
		return mcp.NewToolResultError("result is not a number"), nil
	}
	if math.IsInf(v, 0) {
		return mcp.NewToolResultError("result is too large (overflows a 64-bit float)"), nil
	}
	if v == 0 {
		v = 0 // no -0 in JSON
	}
	return mcp.NewToolResultStructured(Result{Result: v}, Format(v)), nil
}
