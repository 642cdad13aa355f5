package api

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// openapiOp is the part of an OpenAPI operation the status checks read.
type openapiOp struct {
	RequestBody *struct {
		Content map[string]any `yaml:"content"`
	} `yaml:"requestBody"`
	Responses map[string]openapiResponse `yaml:"responses"`
}

// openapiResponse is a response object or a $ref to one in components.responses.
type openapiResponse struct {
	Ref     string         `yaml:"$ref"`
	Content map[string]any `yaml:"content"`
	Headers map[string]any `yaml:"headers"`
}

// statusesWithoutProblem are error statuses that net/http's ServeContent writes itself (GET
// …/content), with a plain-text body or none.
var statusesWithoutProblem = map[string]bool{"412": true, "416": true}

// documentedStatusErrors checks the document's responses against what the router and the handlers
// do: every authenticated route documents 401 (with WWW-Authenticate) and 403 (a user or system
// an operator disabled; operators only); every route documents at
// least one problem+json error; every error status other than ServeContent's is problem+json;
// every request body documents 408 (too slow: rateBody); every JSON request body documents 400,
// 413 and 415 (decodeJSON); every 429 and 503 documents
// Retry-After. It returns one line per violation.
func documentedStatusErrors(doc []byte, routes []route) ([]string, error) {
	var d struct {
		Paths      map[string]map[string]yaml.Node `yaml:"paths"`
		Components struct {
			Responses map[string]openapiResponse `yaml:"responses"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(doc, &d); err != nil {
		return nil, err
	}
	var errs []string
	resolve := func(where string, r openapiResponse) openapiResponse {
		if r.Ref == "" {
			return r
		}
		name, ok := strings.CutPrefix(r.Ref, "#/components/responses/")
		c, found := d.Components.Responses[name]
		if !ok || !found {
			errs = append(errs, fmt.Sprintf("%s: unresolved $ref %q", where, r.Ref))
		}
		return c
	}
	wild := regexp.MustCompile(`\{(\w+)\.\.\.\}`)
	for _, rt := range routes {
		p := wild.ReplaceAllString(strings.ReplaceAll(rt.pattern, "{$}", ""), "{$1}")
		name := rt.method + " " + p
		node, ok := d.Paths[p][strings.ToLower(rt.method)]
		if !ok {
			errs = append(errs, name+": not documented")
			continue
		}
		var op openapiOp
		if err := node.Decode(&op); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		problems := 0
		for code, r := range op.Responses {
			r = resolve(name+" "+code, r)
			isErr := code == "default" || code >= "400"
			_, problem := r.Content["application/problem+json"]
			switch {
			case isErr && problem:
				problems++
			case isErr && !statusesWithoutProblem[code]:
				errs = append(errs, fmt.Sprintf("%s: %s is not application/problem+json", name, code))
			}
			if _, ok := r.Headers["Retry-After"]; (code == "429" || code == "503") && !ok {
				errs = append(errs, fmt.Sprintf("%s: %s does not document Retry-After", name, code))
			}
		}
		if problems == 0 {
			errs = append(errs, name+": documents no problem+json error response")
		}
		if !rt.public {
			if r, ok := op.Responses["401"]; !ok {
				errs = append(errs, name+": authenticated route does not document 401")
			} else if _, ok := resolve(name+" 401", r).Headers["WWW-Authenticate"]; !ok {
				errs = append(errs, name+": 401 does not document WWW-Authenticate")
			}
			if _, ok := op.Responses["403"]; !ok { // the operator's switch (Server.checkEnabled), operators-only
				errs = append(errs, name+": authenticated route does not document 403")
			}
		}
		if op.RequestBody != nil {
			if _, ok := op.Responses["408"]; !ok { // a body below http.min_body_rate (rateBody)
				errs = append(errs, name+": request body but 408 is not documented")
			}
			if _, ok := op.RequestBody.Content["application/json"]; ok {
				for _, code := range []string{"400", "413", "415"} {
					if _, ok := op.Responses[code]; !ok {
						errs = append(errs, fmt.Sprintf("%s: JSON body but %s is not documented", name, code))
					}
				}
			}
		}
	}
	slices.Sort(errs)
	return errs, nil
}

// TestDocumentedStatusChecks proves the checks bite: each broken document is caught.
func TestDocumentedStatusChecks(t *testing.T) {
	routes := []route{{method: "POST", pattern: "/v1/things/{id}"}, {method: "GET", pattern: "/healthz", public: true}}
	const components = `
components:
  responses:
    Problem: {description: p, content: {application/problem+json: {}}}
    Unauthorized: {description: u, headers: {WWW-Authenticate: {}}, content: {application/problem+json: {}}}
    Unavailable: {description: u, headers: {Retry-After: {}}, content: {application/problem+json: {}}}
`
	good := `
paths:
  /v1/things/{id}:
    post:
      requestBody: {content: {application/json: {}}}
      responses:
        "200": {description: ok}
        "400": {$ref: "#/components/responses/Problem"}
        "401": {$ref: "#/components/responses/Unauthorized"}
        "403": {$ref: "#/components/responses/Problem"}
        "408": {$ref: "#/components/responses/Problem"}
        "413": {$ref: "#/components/responses/Problem"}
        "415": {$ref: "#/components/responses/Problem"}
        "503": {$ref: "#/components/responses/Unavailable"}
  /healthz:
    get:
      responses:
        "200": {description: ok}
        "500": {$ref: "#/components/responses/Problem"}
` + components
	tests := []struct {
		name, old, new, want string
	}{
		{"valid", "", "", ""},
		{"no 401", `        "401": {$ref: "#/components/responses/Unauthorized"}` + "\n", "", "POST /v1/things/{id}: authenticated route does not document 401"},
		{"no 403", `        "403": {$ref: "#/components/responses/Problem"}` + "\n", "", "POST /v1/things/{id}: authenticated route does not document 403"},
		{"401 without WWW-Authenticate", `"401": {$ref: "#/components/responses/Unauthorized"}`, `"401": {$ref: "#/components/responses/Problem"}`, "401 does not document WWW-Authenticate"},
		{"public route without a problem", `        "500": {$ref: "#/components/responses/Problem"}` + "\n", "", "GET /healthz: documents no problem+json error response"},
		{"error as JSON", `"400": {$ref: "#/components/responses/Problem"}`, `"400": {description: x, content: {application/json: {}}}`, "400 is not application/problem+json"},
		{"body without 408", `        "408": {$ref: "#/components/responses/Problem"}` + "\n", "", "request body but 408 is not documented"},
		{"JSON body without 415", `        "415": {$ref: "#/components/responses/Problem"}` + "\n", "", "JSON body but 415 is not documented"},
		{"503 without Retry-After", `"503": {$ref: "#/components/responses/Unavailable"}`, `"503": {$ref: "#/components/responses/Problem"}`, "503 does not document Retry-After"},
		{"dangling ref", `"413": {$ref: "#/components/responses/Problem"}`, `"413": {$ref: "#/components/responses/Nope"}`, `unresolved $ref "#/components/responses/Nope"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc := good
			if tc.old != "" {
				if !strings.Contains(doc, tc.old) {
					t.Fatalf("test document lacks %q", tc.old)
				}
				doc = strings.Replace(doc, tc.old, tc.new, 1)
			}
			errs, err := documentedStatusErrors([]byte(doc), routes)
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Join(errs, "\n")
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Fatalf("errors:\n%s\nwant one containing %q", got, tc.want)
			}
		})
	}
}
