//go:build linux || darwin || freebsd

package modelfetch

import "syscall"

// diskFree is the space the disk holding dir has for this user (not root's reserve).
func diskFree(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}
