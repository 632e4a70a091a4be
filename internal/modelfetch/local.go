package modelfetch

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// ggufMagic opens every GGUF file (llama.cpp's gguf.h, GGUF_MAGIC).
var ggufMagic = []byte("GGUF")

// CheckFile says whether path is a model file llama-server can load: it exists, is a regular
// file and starts as GGUF files do. It reads 4 bytes, not the file: a 4 GB model is checked at
// once. The errors name the path and say what the file is instead, when that is clear: a Git
// LFS pointer (a repository cloned without git-lfs) or a web page (a failed download) are
// the usual ones, and llama-server's own words for them ("failed to load model") do not say.
func CheckFile(path string) error {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("model file %s does not exist", path)
	case err != nil:
		return fmt.Errorf("model file: %w", err)
	case fi.IsDir():
		return fmt.Errorf("model file %s is a folder, not a .gguf file", path)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("model file %s is not a regular file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("model file: %w", err)
	}
	defer f.Close()
	head := make([]byte, 64)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return fmt.Errorf("model file %s: %w", path, err)
	}
	head = head[:n]
	switch {
	case bytes.HasPrefix(head, ggufMagic):
		return nil
	case n == 0:
		return fmt.Errorf("model file %s is empty", path)
	case bytes.HasPrefix(head, []byte("version https://git-lfs")):
		return fmt.Errorf("model file %s is a Git LFS pointer, not the model: fetch the file itself (git lfs pull, or toolmesh model pull with its hf:// reference)", path)
	case bytes.HasPrefix(bytes.TrimLeft(head, " \t\r\n"), []byte("<")):
		return fmt.Errorf("model file %s is a web page (HTML or XML), not a GGUF model: a download that went wrong?", path)
	}
	return fmt.Errorf("model file %s is not a GGUF model: it starts with %q, a GGUF file with %q", path, head[:min(n, 4)], ggufMagic)
}
