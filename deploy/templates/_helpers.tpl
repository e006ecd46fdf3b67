{{- /*
  What the templates assume of the values Deckhouse passes (deploy/README.md lists them):
    .Values.aiInference.*                    this module's settings with their defaults
    .Values.aiInference.internal             computed values (none read yet)
    .Values.aiInference.highAvailability     this module's HA setting, if set, else
    .Values.global.highAvailability          the platform's HA mode, if set, else
    .Values.global.discovery.clusterControlPlaneIsHighlyAvailable
    .Values.global.modulesImages.registry.base, .dockercfg; .digests.aiInference.controller
    .Values.global.deckhouseVersion          which RBACv2 scheme the platform reads
  The platform's exposure globals (modules.publicDomainTemplate, https, ingressClass) and
  the rest of the settings are read by the controller from its ModuleConfig, not here.
*/ -}}

{{- define "ai-inference.labels" -}}
heritage: deckhouse
module: {{ .Chart.Name }}
{{- end }}

{{- /*
  The controller's image: registry base @ the digest Deckhouse built for it. A module
  delivered from its own source (a ModuleSource) has a registry of its own in
  `aiInference.registry`, as lib-helm's helm_lib_module_image reads it: its base, then
  the module's name; else the platform's base.
*/ -}}
{{- define "ai-inference.image" -}}
{{- $images := .Values.global.modulesImages -}}
{{- $digest := dig "aiInference" "controller" "" $images.digests -}}
{{- if not $digest -}}
{{- fail "global.modulesImages.digests.aiInference.controller is not set" -}}
{{- end -}}
{{- $base := $images.registry.base -}}
{{- $own := dig "registry" "base" "" .Values.aiInference -}}
{{- if $own -}}
{{- $base = printf "%s/%s" (trimAll "/" $own) .Chart.Name -}}
{{- end -}}
{{- printf "%s@%s" $base $digest -}}
{{- end }}

{{- /* The pull credentials of the registry the image comes from (see the image's). */ -}}
{{- define "ai-inference.dockercfg" -}}
{{- /* dig, not a field: a missing key printed "<no value>", a true string (an empty Secret). */ -}}
{{- dig "registry" "dockercfg" "" .Values.aiInference | default (dig "registry" "dockercfg" "" .Values.global.modulesImages) -}}
{{- end }}

{{- /* "true" when the event log is SQLite: a file one replica writes, on a volume. */ -}}
{{- define "ai-inference.sqlite" -}}
{{- hasPrefix "sqlite" .Values.aiInference.store.url -}}
{{- end }}

{{- /*
  "true" when high availability is asked for, as the platform decides it (lib-helm's
  helm_lib_ha_enabled): the module's `highAvailability` setting when set, else the global
  one when set, else whether the cluster's control plane is highly available.
*/ -}}
{{- define "ai-inference.haRequested" -}}
{{- if hasKey .Values.aiInference "highAvailability" -}}
{{- .Values.aiInference.highAvailability | toString -}}
{{- else if hasKey .Values.global "highAvailability" -}}
{{- .Values.global.highAvailability | toString -}}
{{- else -}}
{{- dig "discovery" "clusterControlPlaneIsHighlyAvailable" false .Values.global | toString -}}
{{- end -}}
{{- end }}

{{- /*
  "true" when the controller runs two replicas: high availability is asked for and the
  event log is shared (PostgreSQL). With SQLite a second replica could not share the file,
  so the module stays at one replica whatever the mode.
*/ -}}
{{- define "ai-inference.ha" -}}
{{- and (eq (include "ai-inference.haRequested" .) "true") (ne (include "ai-inference.sqlite" .) "true") -}}
{{- end }}

{{- /*
  "true" when the platform reads the RBACv2 capability model of DKP 1.78 (labels kind:
  capability, scope, aggregate-to-namespace-as); below 1.78 it reads the legacy use/manage
  labels. Read there, a legacy `use` capability would be granted cluster-wide instead of in
  a namespace (deckhouse/deckhouse modules/140-user-authz/docs/internal/
  RBACV2_MODULE_MIGRATION.md), so the templates render the model the cluster speaks. A
  version that is not x.y (a dev build) gets the new model, whose mistake only loses access.
*/ -}}
{{- define "ai-inference.rbacv2NewScheme" -}}
{{- $raw := dig "deckhouseVersion" "dev" .Values.global | toString -}}
{{- $minor := regexFind "^v?[0-9]+[.][0-9]+" $raw -}}
{{- if $minor -}}
{{- semverCompare ">= 1.78" (printf "%s.0" (trimPrefix "v" $minor)) -}}
{{- else -}}
true
{{- end -}}
{{- end }}

{{- /* The objects of one of the chart's plain files, as a list of maps. */ -}}
{{- define "ai-inference.documents" -}}
{{- $docs := list -}}
{{- range $text := regexSplit "(?m)^---[ \t]*$" (.context.Files.Get .path) -1 -}}
{{- $doc := fromYaml $text -}}
{{- if $doc.kind -}}
{{- $docs = append $docs $doc -}}
{{- end -}}
{{- end -}}
{{- toYaml (dict "items" $docs) -}}
{{- end }}

{{- /*
  The cluster's egress proxy (global.clusterConfiguration.proxy), as lib-helm's
  helm_lib_envs_for_proxy gives it to a module's pods: the hub resolver goes through it,
  and the controller hands the same variables to the runtimes it renders (their weights'
  download). NO_PROXY keeps the cluster's own names and subnets off the proxy.
*/ -}}
{{- define "ai-inference.proxyEnv" -}}
{{- $cluster := (.Values.global).clusterConfiguration | default dict -}}
{{- $proxy := $cluster.proxy | default dict -}}
{{- if or $proxy.httpProxy $proxy.httpsProxy -}}
{{- if $proxy.httpProxy }}
- name: HTTP_PROXY
  value: {{ $proxy.httpProxy | quote }}
- name: http_proxy
  value: {{ $proxy.httpProxy | quote }}
{{- end }}
{{- if $proxy.httpsProxy }}
- name: HTTPS_PROXY
  value: {{ $proxy.httpsProxy | quote }}
- name: https_proxy
  value: {{ $proxy.httpsProxy | quote }}
{{- end }}
{{- $noProxy := list "127.0.0.1" "169.254.169.254" -}}
{{- range $key := list "clusterDomain" "podSubnetCIDR" "serviceSubnetCIDR" -}}
{{- if index $cluster $key }}{{ $noProxy = append $noProxy (index $cluster $key) }}{{ end -}}
{{- end -}}
{{- $noProxy = concat $noProxy ($proxy.noProxy | default list) }}
- name: NO_PROXY
  value: {{ $noProxy | join "," | quote }}
- name: no_proxy
  value: {{ $noProxy | join "," | quote }}
{{- end -}}
{{- end -}}
