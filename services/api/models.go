package api

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/errreason"
	"github.com/toolmesh/toolmesh/internal/toolid/toolname"
)

// modelCache is the name of the model the inference service last said it answers with, so that
// checking a request's model costs nothing while it stays the same.
type modelCache struct {
	mu   sync.Mutex
	name string
}

func (c *modelCache) get() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.name
}

func (c *modelCache) set(name string) {
	if name == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.name = name
}

// ListModels lists the model the inference service answers with.
func (h *agentHandler) ListModels(ctx context.Context, _ *toolmeshv1.ListModelsRequest) (*toolmeshv1.ListModelsResponse, error) {
	if d := h.policy.Ask(caller(ctx, nil)); d != nil {
		return nil, h.policy.Record(ctx, d)
	}
	if h.inference == nil {
		return &toolmeshv1.ListModelsResponse{}, nil
	}
	st, err := h.modelStatus(ctx)
	if err != nil {
		return nil, err
	}
	if st.GetModel() == "" {
		return &toolmeshv1.ListModelsResponse{}, nil
	}
	return &toolmeshv1.ListModelsResponse{Models: []*toolmeshv1.Model{{Id: st.GetModel(), Ready: st.GetReady(), Backend: st.GetBackend()}}}, nil
}

func (h *agentHandler) modelStatus(ctx context.Context) (*toolmeshv1.GetModelStatusResponse, error) {
	sctx, cancel := context.WithTimeout(ctx, h.cfg.RPCTimeout)
	defer cancel()
	st, err := h.inference.GetModelStatus(sctx, &toolmeshv1.GetModelStatusRequest{})
	if err != nil {
		return nil, dependencyError(sctx, "inference", h.cfg.InferenceAddr, err)
	}
	h.models.set(st.GetModel())
	return st, nil
}

// checkModel refuses a request for a model the mesh does not answer with. The name is asked of
// the inference service only when it differs from the one last seen (a restart may change it).
func (h *agentHandler) checkModel(ctx context.Context, name string) error {
	if name == h.models.get() {
		return nil
	}
	st, err := h.modelStatus(ctx)
	if err != nil {
		return err
	}
	if name != st.GetModel() {
		return status.Errorf(codes.NotFound, "the model %q does not exist: this mesh answers with %q (GET /v1/models lists it)", truncateUTF8(name, 64), st.GetModel())
	}
	return nil
}

// checkClashes refuses a caller's function named like a mesh tool the caller may call, as
// models see it (SERVER__TOOL): the model, and whoever reads its calls, could not tell them
// apart. It asks the executor only when the request has functions.
func (r *runner) checkClashes(ctx context.Context) error {
	if len(r.q.functions) == 0 {
		return nil
	}
	h := r.h
	sctx, cancel := context.WithTimeout(ctx, h.cfg.RPCTimeout)
	defer cancel()
	list, err := h.executor.ListTools(sctx, &toolmeshv1.ExecutorServiceListToolsRequest{})
	if err != nil {
		return dependencyError(sctx, "executor", h.cfg.ExecutorAddr, err)
	}
	names := make(map[string]string, len(list.GetTools()))
	for _, t := range list.GetTools() {
		if h.policy.Call(r.caller, t.GetId()) == nil {
			names[toolname.Base(t.GetId())] = t.GetId()
		}
	}
	for i, f := range r.q.functions {
		if id, ok := names[f.GetName()]; ok {
			return errreason.InvalidField(fmt.Sprintf("functions[%d].name", i), fmt.Sprintf(
				"%q is the name of the mesh's tool %s, which the model is offered too: rename the function", f.GetName(), id))
		}
	}
	return nil
}

// isFunction says whether a tool id the model called names a caller's function: a mesh tool's
// id always has a dot, a function's name never does.
func isFunction(id string) bool { return !strings.Contains(id, ".") }
