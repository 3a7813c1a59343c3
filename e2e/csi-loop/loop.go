package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// run executes a tool and returns its stdout; errors carry its stderr.
func run(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// loopsOf lists the loop devices backed by file, read from sysfs (which also
// names files deleted since: "<path> (deleted)").
func loopsOf(file string) ([]string, error) {
	entries, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		return nil, err
	}
	var devs []string
	for _, e := range entries {
		b, err := os.ReadFile(e)
		if err != nil {
			continue // detached meanwhile
		}
		back := strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)")
		if back == file {
			devs = append(devs, "/dev/"+filepath.Base(filepath.Dir(filepath.Dir(e))))
		}
	}
	return devs, nil
}

// attach returns the loop device of file, attaching one if there is none.
func attach(file string) (string, error) {
	devs, err := loopsOf(file)
	if err != nil {
		return "", err
	}
	if len(devs) > 0 {
		return devs[0], nil
	}
	out, err := run("losetup", "--find", "--show", file)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(out), nil
}

func detach(file string) error {
	devs, err := loopsOf(file)
	if err != nil {
		return err
	}
	for _, d := range devs {
		if _, err := run("losetup", "--detach", d); err != nil {
			return err
		}
	}
	return nil
}

// mountSource returns the device mounted at path, or "" when path is not a
// mount point (the last mount there wins, as in the kernel).
func mountSource(path string) (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	path = filepath.Clean(path)
	src := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		// id parent major:minor root mountpoint opts [optional...] - fstype source superopts
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || unescape(fields[4]) != path {
			continue
		}
		for i := 6; i < len(fields)-2; i++ {
			if fields[i] == "-" {
				src = unescape(fields[i+2])
				break
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return src, nil
}

func isMountPoint(path string) (bool, error) {
	src, err := mountSource(path)
	return src != "", err
}

// unescape undoes mountinfo's octal escapes (\040 for a space, ...).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
