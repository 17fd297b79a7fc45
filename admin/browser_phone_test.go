package admin

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestConsole_FitsAPhone opens every page of the console at a phone's
// width (390 px) in Chromium: none is wider than the screen (a wide table
// scrolls inside itself). With SLUICE_CONSOLE_SCREENSHOTS=dir it saves a
// PNG of each page there, named phone-*.png.
func TestConsole_FitsAPhone(t *testing.T) {
	exe := chromium(t)
	e := newEnv(t)
	seedConsole(t, e)
	made := e.must(http.StatusCreated, "POST", "/admin/v1/keys", rootToken, map[string]any{"workspace": "acme", "user": "ada", "name": "ada's laptop",
		"limits": map[string]any{"requests_per_minute": 60, "budget": map[string]any{"period": "day", "dollars": "5"}}})
	keyID := made.body["key"].(map[string]any)["id"].(string)
	shots := os.Getenv("SLUICE_CONSOLE_SCREENSHOTS")

	const width = 390
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(exe), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(width, 844))
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(alloc)
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	defer cancelTimeout()
	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	base := e.srv.URL
	run("sign in", chromedp.EmulateViewport(width, 844), chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), rootToken), chromedp.Click(chromedp.ID("signin")), chromedp.WaitVisible(chromedp.ID("workspaces")))
	for name, path := range map[string]string{
		"workspaces": "/ui/", "workspace": "/ui/workspaces/acme", "rules": "/ui/rules", "keys": "/ui/keys", "key": "/ui/keys/" + keyID,
		"overrides": "/ui/overrides", "sessions": "/ui/sessions", "reservations": "/ui/reservations", "calls": "/ui/calls", "audit": "/ui/audit",
	} {
		run("open "+name, chromedp.Navigate(base+path), chromedp.WaitVisible(chromedp.CSS("main h1")))
		wide, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth`))
		if err != nil {
			t.Fatal(err)
		}
		if wide > width {
			t.Errorf("%s (%s) is %d px wide at a %d px screen", name, path, wide, width)
		}
		if shots != "" {
			png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
			if err != nil {
				t.Fatalf("screenshot %s: %v", name, err)
			}
			if err := os.WriteFile(filepath.Join(shots, "phone-"+name+".png"), png, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
